package redis

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/tinylib/msgp/msgp"
)

// encodeBoth returns row i of rec in both encodings.
func encodeBoth(t testing.TB, schema *arrow.Schema, key string, rec arrow.RecordBatch, i int) (js, mp []byte) {
	t.Helper()
	for _, e := range []string{EncodingJSON, EncodingMsgpack} {
		enc, err := newRecordEncoder(schema, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.setEncoding(e); err != nil {
			t.Fatal(err)
		}
		bb, err := enc.bind(rec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := bb.appendRecord(nil, i)
		if err != nil {
			t.Fatalf("%s row %d: %v", e, i, err)
		}
		if e == EncodingJSON {
			js = b
		} else {
			mp = b
		}
	}
	return js, mp
}

// TestMsgpackTranscodesToTheJSONRecord: a msgpack record read back through
// AppendRecordJSON is byte for byte the JSON record of the same row, for
// every encodable type, and a JSON record passes through unchanged.
func TestMsgpackTranscodesToTheJSONRecord(t *testing.T) {
	schema, rec, f32s := typesBatch()
	defer rec.Release()
	for i := range f32s {
		js, mp := encodeBoth(t, schema, "k", rec, i)
		if !IsMsgpackRecord(mp) || IsMsgpackRecord(js) {
			t.Fatalf("row %d: sniffing: msgpack %x, json %s", i, mp[:1], js[:1])
		}
		got, err := AppendRecordJSON(nil, mp)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if !bytes.Equal(got, js) {
			t.Fatalf("row %d:\nmsgpack→json %s\njson         %s", i, got, js)
		}
		if again, _ := AppendRecordJSON(nil, js); !bytes.Equal(again, js) {
			t.Fatalf("json record changed: %s", again)
		}
	}
}

// TestMsgpackFloat32ListIsBin: a float32 vector is one bin of little-endian
// float32s (what the redis-cli one-liner of docs/guarantees.md decodes), a generic
// msgpack reader sees the same fields, and the record is about a third of
// the JSON one.
func TestMsgpackFloat32ListIsBin(t *testing.T) {
	run := vecRun("v1")
	rec := vecBatch(run, 0, 3, 100)
	defer rec.Release()
	js, mp := encodeBoth(t, run.Schema, run.Key, rec, 2)
	n, rest, err := msgp.ReadMapHeaderBytes(mp)
	if err != nil || n != 3 {
		t.Fatalf("map header: %d fields, %v", n, err)
	}
	var vec []byte
	for range n {
		var k []byte
		if k, rest, err = msgp.ReadStringZC(rest); err != nil {
			t.Fatal(err)
		}
		if string(k) == "vec" {
			if msgp.NextType(rest) != msgp.BinType {
				t.Fatalf("vec is %s, want bin", msgp.NextType(rest))
			}
			vec, rest, err = msgp.ReadBytesZC(rest)
		} else {
			rest, err = msgp.Skip(rest)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(vec) != 400 {
		t.Fatalf("vec bin of %d bytes, want 400", len(vec))
	}
	for j := range 100 {
		if f := math.Float32frombits(binary.LittleEndian.Uint32(vec[4*j:])); f != vecValue(2, j) {
			t.Fatalf("vec[%d] = %v, want %v", j, f, vecValue(2, j))
		}
	}
	var generic bytes.Buffer
	if _, err := msgp.UnmarshalAsJSON(&generic, mp); err != nil {
		t.Fatalf("generic msgpack reader: %v", err)
	}
	if !strings.Contains(generic.String(), `"model_version":"model-v1"`) {
		t.Fatalf("generic reader: %s", generic.String())
	}
	if 3*len(mp) > 2*len(js)-len(js)/3 { // ≤ ~45% of JSON's bytes
		t.Fatalf("msgpack record %d bytes, json %d", len(mp), len(js))
	}
	t.Logf("100-dim record: json %d bytes, msgpack %d bytes", len(js), len(mp))
}

// TestMsgpackNullsAndNonFinite: a float32 list with a null element is an
// array of float32 and nil (a bin cannot hold a null), and NaN is refused
// as in JSON.
func TestMsgpackNullsAndNonFinite(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	rb.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	l := rb.Field(1).(*array.ListBuilder)
	vb := l.ValueBuilder().(*array.Float32Builder)
	l.Append(true)
	vb.AppendValues([]float32{1.5, 0, 2.25}, []bool{true, false, true})
	l.AppendNull()
	l.Append(true)
	vb.AppendValues([]float32{float32(math.NaN())}, nil)
	rec := rb.NewRecordBatch()
	defer rec.Release()
	for i, want := range []string{`{"v":[1.5,null,2.25]}`, `{"v":null}`} {
		js, mp := encodeBoth(t, schema, "k", rec, i)
		got, err := AppendRecordJSON(nil, mp)
		if err != nil || string(got) != want || string(js) != want {
			t.Fatalf("row %d: msgpack→json %s (%v), json %s, want %s", i, got, err, js, want)
		}
	}
	enc, _ := newRecordEncoder(schema, "k")
	enc.setEncoding(EncodingMsgpack)
	bb, _ := enc.bind(rec)
	if _, err := bb.appendRecord(nil, 2); err == nil || !strings.Contains(err.Error(), `field "v"`) || !strings.Contains(err.Error(), "non-finite") {
		t.Fatalf("NaN in msgpack: %v", err)
	}
}

// TestAppendRecordJSONRejectsCorrupt: truncated or foreign msgpack is an
// error, never a panic or a partial record.
func TestAppendRecordJSONRejectsCorrupt(t *testing.T) {
	run := vecRun("v1")
	rec := vecBatch(run, 0, 1, 8)
	defer rec.Release()
	_, mp := encodeBoth(t, run.Schema, run.Key, rec, 0)
	for cut := 1; cut < len(mp); cut++ {
		if _, err := AppendRecordJSON(nil, mp[:cut]); err == nil {
			t.Fatalf("record cut at %d of %d bytes decoded", cut, len(mp))
		}
	}
	if _, err := AppendRecordJSON(nil, append(append([]byte{}, mp...), 0xc0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
	odd := msgp.AppendBytes(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "v"), []byte{1, 2, 3})
	if _, err := AppendRecordJSON(nil, odd); err == nil || !strings.Contains(err.Error(), "multiple of 4") {
		t.Fatalf("3-byte vector: %v", err)
	}
}

func BenchmarkEncodeVec(b *testing.B) {
	for _, dim := range []int{100, 384} {
		run := vecRun("v1")
		rec := vecBatch(run, 0, 1024, dim)
		for _, e := range []string{EncodingJSON, EncodingMsgpack} {
			b.Run(e+"/"+map[int]string{100: "vec100", 384: "vec384"}[dim], func(b *testing.B) {
				enc, _ := newRecordEncoder(run.Schema, run.Key)
				enc.setEncoding(e)
				bb, _ := enc.bind(rec)
				var buf []byte
				n := 0
				for b.Loop() {
					for i := range 1024 {
						buf, _ = bb.appendRecord(buf[:0], i)
						n += len(buf)
					}
				}
				b.ReportMetric(float64(n)/float64(b.N*1024), "bytes/record")
				b.ReportMetric(float64(b.N)*1024/b.Elapsed().Seconds(), "rows/s")
			})
		}
		rec.Release()
	}
}
