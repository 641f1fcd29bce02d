package parquet

import (
	"path/filepath"
	"runtime"
	"testing"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/sources"
)

// TestReadAllocatesStreamBuffer: reading a shard allocates about one
// stream buffer per column, not the column chunks: the pages are read
// through a 16 KiB buffer into the page reader's pooled buffers. Reading
// a small chunk whole allocated it afresh on every shard, and a 1 MiB
// stream buffer allocated up to 1 MiB per column and copied every page out
// of it once more (together a third of a null-model job's read CPU).
// Every row still reads back, from row groups of small chunks and of
// chunks larger than any buffer.
func TestReadAllocatesStreamBuffer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rows     int64
		rowGroup int64
	}{
		// 20k int64 ids and float32 scores, uncompressed: 160 kB and
		// 80 kB chunks.
		{"small chunks", 20_000, 20_000},
		// 300k rows: a 2.4 MB id chunk of three pages.
		{"chunks over a MiB", 300_000, 300_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d", "part-0.parquet")
			writeArrowFile(t, path, 0, tc.rows, tc.rowGroup, pq.WithCompression(compress.Codecs.Uncompressed), pq.WithDictionaryDefault(false))
			src := mustNew(t, filepath.Dir(path))
			plans := mustPlan(t, src, tc.rows)
			if len(plans) != 1 {
				t.Fatalf("%d shards, want 1", len(plans))
			}
			opts := sources.ReadOptions{BatchSize: 4096, Columns: []string{"id", "score"}, Reuse: true}
			chunks := chunkBytes(t, path, "id", "score")
			releaseAll(readShards(t, src, plans, opts)) // warms the pool
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			recs := readShards(t, src, plans, opts)
			runtime.ReadMemStats(&after)
			defer releaseAll(recs)
			alloc := int64(after.TotalAlloc - before.TotalAlloc)
			if limit := min(chunks, 1<<20); alloc >= limit {
				t.Errorf("reading the shard allocated %d bytes; want under %d (its two column chunks hold %d)", alloc, limit, chunks)
			}
			ids := int64Column(t, recs, "id")
			if int64(len(ids)) != tc.rows {
				t.Fatalf("read %d ids, want %d", len(ids), tc.rows)
			}
			for i, v := range ids {
				if v != int64(i) {
					t.Fatalf("row %d: id %d", i, v)
				}
			}
		})
	}
}

// chunkBytes is the total size of the named columns' chunks in path.
func chunkBytes(t *testing.T, path string, cols ...string) int64 {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	var n int64
	for rg := range pf.NumRowGroups() {
		g := pf.MetaData().RowGroup(rg)
		for _, name := range cols {
			cc, err := g.ColumnChunk(pf.MetaData().Schema.ColumnIndexByName(name))
			if err != nil {
				t.Fatal(err)
			}
			n += cc.TotalCompressedSize()
		}
	}
	return n
}
