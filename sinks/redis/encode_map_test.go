package redis

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestEncodeMap writes map fields (an sklearn ZipMap output) as JSON
// objects in entry order: integer keys quoted, string keys escaped, empty
// and null maps, and a NaN value is an error naming the map value.
func TestEncodeMap(t *testing.T) {
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "pi", Type: arrow.MapOf(arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "ps", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Float64)},
	}, nil)
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	mi, ms := rb.Field(1).(*array.MapBuilder), rb.Field(2).(*array.MapBuilder)
	for r := range 3 {
		rb.Field(0).(*array.Int64Builder).Append(int64(r))
		switch r {
		case 0:
			mi.Append(true)
			mi.KeyBuilder().(*array.Int64Builder).AppendValues([]int64{1, 0, -7}, nil)
			mi.ItemBuilder().(*array.Float32Builder).AppendValues([]float32{0.25, 0.1, 1}, nil)
		case 1:
			mi.AppendNull()
		case 2:
			mi.Append(true) // empty
		}
		ms.Append(true)
		if r != 1 {
			ms.KeyBuilder().(*array.StringBuilder).AppendValues([]string{"pos", `a "b"`}, nil)
			ms.ItemBuilder().(*array.Float64Builder).AppendValues([]float64{0.5, 1e-300}, nil)
		}
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	enc, err := newRecordEncoder(schema, "k")
	if err != nil {
		t.Fatal(err)
	}
	bb, err := enc.bind(rec)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range []string{
		`{"pi":{"1":0.25,"0":0.1,"-7":1},"ps":{"pos":0.5,"a \"b\"":1e-300}}`,
		`{"pi":null,"ps":{}}`,
		`{"pi":{},"ps":{"pos":0.5,"a \"b\"":1e-300}}`,
	} {
		got, err := bb.appendRecord(nil, r)
		if err != nil {
			t.Fatalf("row %d: %v", r, err)
		}
		if string(got) != want {
			t.Errorf("row %d:\n got %s\nwant %s", r, got, want)
		}
		// encoding: msgpack stores the same object: transcoded, it is the
		// JSON record byte for byte.
		js, mp := encodeBoth(t, schema, "k", rec, r)
		back, err := AppendRecordJSON(nil, mp)
		if err != nil || !bytes.Equal(back, js) {
			t.Errorf("row %d msgpack: %v\n got %s\nwant %s", r, err, back, js)
		}
	}

	bad := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "m", Type: arrow.MapOf(arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float32)},
	}, nil)
	if _, err := newRecordEncoder(bad, "k"); err == nil {
		t.Fatal("float map keys: want an error")
	}
}
