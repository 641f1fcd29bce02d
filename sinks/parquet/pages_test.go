package parquet

import (
	"context"
	"github.com/apache/arrow-go/v18/arrow"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/jobs"
)

// TestDataPagesBounded: a shard's column chunks are cut into data pages of
// at most DataPageBytes before compression (the writer's three page-sized
// buffers stay small and warm), and every row reads back. With arrow-go's
// 1 MiB default the 800 kB id chunk of 100k rows was one page.
func TestDataPagesBounded(t *testing.T) {
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "out")})
	run := constRun()
	ctx := context.Background()
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	sw, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := sw.(*shardWriter)
	const rows, batch = 100_000, 16384
	want := map[int64]string{}
	for lo := 0; lo < rows; lo += batch {
		hi := min(lo+batch, rows)
		rec := constBatch(run, lo, hi, "v-c1", func(int) string { return "t-one" })
		for i := lo; i < hi; i++ {
			want[int64(i)] = "t-one"
		}
		if err := w.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pf, err := file.OpenParquetFile(w.final, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	pages := 0
	for rg := range pf.NumRowGroups() {
		pr, err := pf.RowGroup(rg).GetColumnPageReader(0) // id: 8 bytes a row
		if err != nil {
			t.Fatal(err)
		}
		for pr.Next() {
			dp, ok := pr.Page().(file.DataPage)
			if !ok {
				continue
			}
			pages++
			if n := dp.UncompressedSize(); n > DataPageBytes+1024 {
				t.Errorf("row group %d: a data page of %d bytes before compression, over %d", rg, n, DataPageBytes)
			}
		}
		if err := pr.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if need := rows * 8 / DataPageBytes; pages < need {
		t.Errorf("the id column has %d data pages; %d bytes of ids need at least %d", pages, rows*8, need)
	}
	checkConstFile(t, w.final, run, want, "v-c1")
}

// TestPageBytesByNesting: flat files get small pages, files with a list
// column (embeddings, top-k lists) arrow-go's 1 MiB, where small pages cost
// the write stage twice the time (the bench's text job).
func TestPageBytesByNesting(t *testing.T) {
	flat := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "score", Type: arrow.PrimitiveTypes.Float32}}, nil)
	if got := pageBytes(flat); got != DataPageBytes {
		t.Errorf("flat schema: page bound %d, want %d", got, DataPageBytes)
	}
	nested := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "embedding", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)}}, nil)
	if got := pageBytes(nested); got != NestedDataPageBytes {
		t.Errorf("schema with a list column: page bound %d, want %d", got, NestedDataPageBytes)
	}
}
