package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pgo "github.com/parquet-go/parquet-go"

	"github.com/precog-ml/precog/sources"
)

// pgRow is the row type written with parquet-go: every numeric width, a
// string key, a repeated (list) column, an optional column and a
// dictionary-encoded column. All values derive from the row id.
type pgRow struct {
	Key string    `parquet:"key"`
	ID  int64     `parquet:"id"`
	I8  int8      `parquet:"i8"`
	I16 int16     `parquet:"i16"`
	I32 int32     `parquet:"i32"`
	U8  uint8     `parquet:"u8"`
	U16 uint16    `parquet:"u16"`
	U32 uint32    `parquet:"u32"`
	U64 uint64    `parquet:"u64"`
	F32 float32   `parquet:"f32"`
	F64 float64   `parquet:"f64"`
	Vec []float32 `parquet:"vec,list"`
	Opt *float64  `parquet:"opt,optional"`
	Cat string    `parquet:"cat,dict"`
}

func makePgRow(i int64) pgRow {
	r := pgRow{
		Key: fmt.Sprintf("user-%07d", i),
		ID:  i,
		I8:  int8(i % 100), I16: int16(i % 30000), I32: int32(i * 3),
		U8: uint8(i % 250), U16: uint16(i % 60000), U32: uint32(i * 5), U64: uint64(i) * 7,
		F32: float32(i) / 2, F64: float64(i) / 4,
		Vec: []float32{float32(i), float32(i) + 1, float32(i) + 2},
		Cat: fmt.Sprintf("cat-%d", i%3),
	}
	if i%5 != 0 {
		v := float64(i)
		r.Opt = &v
	}
	return r
}

// writePgFile writes rows [start, start+n) with parquet-go, flushing a row
// group every rowGroup rows.
func writePgFile(t testing.TB, path string, start, n, rowGroup int64, opts ...pgo.WriterOption) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pgo.NewGenericWriter[pgRow](f, opts...)
	buf := make([]pgRow, 0, 1024)
	var inGroup int64
	for i := start; i < start+n; i++ {
		buf = append(buf, makePgRow(i))
		inGroup++
		if len(buf) == cap(buf) || inGroup == rowGroup || i == start+n-1 {
			if _, err := w.Write(buf); err != nil {
				t.Fatal(err)
			}
			buf = buf[:0]
		}
		if inGroup == rowGroup {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			inGroup = 0
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// arrowSchemaForTest is the schema written with pqarrow: nullable columns,
// a fixed-size list, a list and a binary key.
var arrowSchemaForTest = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "bkey", Type: arrow.BinaryTypes.Binary},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "emb", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)},
	{Name: "hist", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
}, nil)

// writeArrowFile writes rows [start, start+n) with pqarrow. Row i has a null
// name when i%7 == 3, a null score when i%4 == 1 and a null hist when
// i%9 == 2.
func writeArrowFile(t testing.TB, path string, start, n, rowGroup int64, props ...pq.WriterProperty) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	props = append([]pq.WriterProperty{pq.WithMaxRowGroupLength(rowGroup)}, props...)
	fw, err := pqarrow.NewFileWriter(arrowSchemaForTest, f, pq.NewWriterProperties(props...), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrowSchemaForTest)
	defer b.Release()
	for i := start; i < start+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.BinaryBuilder).Append([]byte(fmt.Sprintf("b%06d", i)))
		if i%7 == 3 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("name-%d", i%11))
		}
		if i%4 == 1 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Float32Builder).Append(float32(i) * 1.5)
		}
		fl := b.Field(4).(*array.FixedSizeListBuilder)
		fl.Append(true)
		for k := int64(0); k < 4; k++ {
			fl.ValueBuilder().(*array.Float32Builder).Append(float32(i*10 + k))
		}
		lb := b.Field(5).(*array.ListBuilder)
		if i%9 == 2 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for k := int64(0); k < i%4; k++ {
				lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
			}
		}
		if (i-start+1)%rowGroup == 0 || i == start+n-1 {
			rec := b.NewRecordBatch()
			if err := fw.Write(rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
}

// readShards reads every shard of plans and returns the batches; the caller
// releases them.
func readShards(t testing.TB, src *Source, plans []sources.ShardPlan, opts sources.ReadOptions) []arrow.RecordBatch {
	t.Helper()
	var out []arrow.RecordBatch
	for _, p := range plans {
		out = append(out, readShard(t, src, p, opts)...)
	}
	return out
}

func readShard(t testing.TB, src *Source, p sources.ShardPlan, opts sources.ReadOptions) []arrow.RecordBatch {
	t.Helper()
	ctx := context.Background()
	r, err := src.Open(ctx, p.Plan, opts)
	if err != nil {
		t.Fatalf("open %s: %v", p.Desc, err)
	}
	defer r.Close()
	var out []arrow.RecordBatch
	var rows int64
	for {
		rec, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("next %s: %v", p.Desc, err)
		}
		rows += rec.NumRows()
		out = append(out, rec)
	}
	if rows != p.Rows {
		t.Fatalf("shard %s: read %d rows, plan says %d", p.Desc, rows, p.Rows)
	}
	return out
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// int64Column gathers column name of recs as int64 values.
func int64Column(t testing.TB, recs []arrow.RecordBatch, name string) []int64 {
	t.Helper()
	var out []int64
	for _, r := range recs {
		idx := r.Schema().FieldIndices(name)
		if len(idx) == 0 {
			t.Fatalf("column %q missing from %s", name, r.Schema())
		}
		col, ok := r.Column(idx[0]).(*array.Int64)
		if !ok {
			t.Fatalf("column %q is %s, want int64", name, r.Column(idx[0]).DataType())
		}
		out = append(out, col.Int64Values()...)
	}
	return out
}

func mustNew(t testing.TB, path string) *Source {
	t.Helper()
	s, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPlan(t testing.TB, s *Source, rows int64) []sources.ShardPlan {
	t.Helper()
	p, err := s.Plan(context.Background(), rows)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// codecs lists the compressions tested with both writers.
var codecs = []struct {
	name string
	ar   compress.Compression
	pg   pgo.WriterOption
}{
	{"uncompressed", compress.Codecs.Uncompressed, pgo.Compression(&pgo.Uncompressed)},
	{"snappy", compress.Codecs.Snappy, pgo.Compression(&pgo.Snappy)},
	{"zstd", compress.Codecs.Zstd, pgo.Compression(&pgo.Zstd)},
	{"gzip", compress.Codecs.Gzip, pgo.Compression(&pgo.Gzip)},
}
