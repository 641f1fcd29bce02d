package redis

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/sinks"
)

// nanBatch is rows 40..42 of run with row 41's score NaN.
func nanBatch(run sinks.RunInfo) arrow.RecordBatch {
	good := testBatch(run, 40, 43, 1)
	defer good.Release()
	b := array.NewFloat32Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues([]float32{1, float32(math.NaN()), 2}, nil)
	score := b.NewArray()
	defer score.Release()
	cols := good.Columns()
	cols = append([]arrow.Array(nil), cols...)
	cols[1] = score
	return array.NewRecordBatch(run.Schema, cols, 3)
}

// typesBatch is a batch of every encodable type (with a null, odd
// strings, extreme floats) and the float32s of its f32 column.
func typesBatch() (*arrow.Schema, arrow.RecordBatch, []float32) {
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.BinaryTypes.String},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "s \"q\"", Type: arrow.BinaryTypes.String},
		{Name: "fsl", Type: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32)},
		{Name: "ll", Type: arrow.LargeListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32},
	}, nil)
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	f32s := []float32{0.1, 1.0000001, 3.4028235e38, 1e-45, -0}
	for i, f := range f32s {
		rb.Field(0).(*array.StringBuilder).Append("key" + string(rune('a'+i)))
		if i == 4 {
			rb.Field(1).AppendNull()
		} else {
			rb.Field(1).(*array.Float32Builder).Append(f)
		}
		rb.Field(2).(*array.Float64Builder).Append(float64(f)*1e-300 + 0.5)
		rb.Field(3).(*array.Int32Builder).Append(int32(-i * 1000000))
		rb.Field(4).(*array.Uint8Builder).Append(uint8(250 + i))
		rb.Field(5).(*array.BooleanBuilder).Append(i%2 == 0)
		rb.Field(6).(*array.StringBuilder).Append("tab\there \"quoted\" \\ \x01 é \xff")
		fl := rb.Field(7).(*array.FixedSizeListBuilder)
		fl.Append(true)
		fl.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{f, -f}, nil)
		ll := rb.Field(8).(*array.LargeListBuilder)
		ll.Append(true)
		for j := 0; j < i; j++ {
			ll.ValueBuilder().(*array.Int64Builder).Append(math.MaxInt64 - int64(j))
		}
		rb.Field(9).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2024, 1, 2, 3, 4, 5, 6+i, time.UTC).UnixNano()))
		rb.Field(10).(*array.Date32Builder).Append(arrow.Date32FromTime(time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)))
	}
	return schema, rb.NewRecordBatch(), f32s
}

func TestEncodeTypes(t *testing.T) {
	schema, rec, f32s := typesBatch()
	defer rec.Release()
	enc, err := newRecordEncoder(schema, "k")
	if err != nil {
		t.Fatal(err)
	}
	bb, err := enc.bind(rec)
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for i := range f32s {
		buf, err = bb.appendRecord(buf[:0], i)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			F32 *float32  `json:"f32"`
			F64 float64   `json:"f64"`
			I32 int32     `json:"i32"`
			U8  uint8     `json:"u8"`
			B   bool      `json:"b"`
			FSL []float32 `json:"fsl"`
			LL  []int64   `json:"ll"`
			TS  time.Time `json:"ts"`
			D   string    `json:"d"`
		}
		var fields map[string]any
		if err := json.Unmarshal(buf, &got); err != nil {
			t.Fatalf("row %d: %v: %s", i, err, buf)
		}
		if err := json.Unmarshal(buf, &fields); err != nil || len(fields) != 10 {
			t.Fatalf("row %d: %d fields, %v: %s", i, len(fields), err, buf)
		}
		if i == 4 {
			if got.F32 != nil {
				t.Fatalf("null float: %s", buf)
			}
		} else if *got.F32 != f32s[i] {
			t.Fatalf("float32 %v round-tripped to %v: %s", f32s[i], *got.F32, buf)
		}
		if got.F64 != float64(f32s[i])*1e-300+0.5 || got.I32 != int32(-i*1000000) || got.U8 != uint8(250+i) || got.B != (i%2 == 0) {
			t.Fatalf("row %d: %+v from %s", i, got, buf)
		}
		if fields["s \"q\""] != "tab\there \"quoted\" \\ \x01 é \ufffd" {
			t.Fatalf("string %q from %s", fields["s \"q\""], buf)
		}
		if len(got.FSL) != 2 || got.FSL[0] != f32s[i] || len(got.LL) != i || (i > 0 && got.LL[i-1] != math.MaxInt64-int64(i-1)) {
			t.Fatalf("lists: %+v from %s", got, buf)
		}
		if !got.TS.Equal(time.Date(2024, 1, 2, 3, 4, 5, 6+i, time.UTC)) || got.D != "2024-02-29" {
			t.Fatalf("time fields: %+v from %s", got, buf)
		}
		if strings.Contains(string(buf), `"k"`) {
			t.Fatalf("key column encoded in value: %s", buf)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	if _, err := newRecordEncoder(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Float64}}, nil), "k"); err == nil || !strings.Contains(err.Error(), `key column "k"`) {
		t.Fatalf("float key: %v", err)
	}
	if _, err := newRecordEncoder(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil), "user"); err == nil || !strings.Contains(err.Error(), `key column "user"`) {
		t.Fatalf("missing key: %v", err)
	}
	s := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}, {Name: "m", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.BinaryTypes.String})}}, nil)
	if _, err := newRecordEncoder(s, "k"); err == nil || !strings.Contains(err.Error(), `output field "m"`) {
		t.Fatalf("struct field: %v", err)
	}
	for _, f := range []float64{math.Inf(1), math.Inf(-1)} {
		b := array.NewFloat64Builder(memory.DefaultAllocator)
		b.Append(f)
		w, _ := newValueWriter(b.NewArray())
		if _, err := w.appendValue(nil, 0); err == nil {
			t.Fatalf("%v encoded", f)
		}
		b.Release()
	}
}

func BenchmarkEncodeRecs(b *testing.B) {
	run := testRun("v1")
	rec := testBatch(run, 0, 1024, 50)
	defer rec.Release()
	enc, _ := newRecordEncoder(run.Schema, run.Key)
	var buf []byte
	b.ResetTimer()
	for b.Loop() {
		bb, _ := enc.bind(rec)
		for i := 0; i < 1024; i++ {
			buf, _ = bb.appendRecord(buf[:0], i)
		}
	}
	b.ReportMetric(float64(b.N)*1024/b.Elapsed().Seconds(), "rows/s")
}
