package parquet

import (
	"context"
	"path/filepath"
	"testing"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/precog-ml/precog/sources"
)

// TestWholeColumnChunks: a shard whose column chunks all fit the stream
// buffer is read chunk by chunk in one read each (no buffered stream, whose
// copy of every page cost 11% of a null-model job); a shard with a larger
// chunk keeps the stream, which bounds memory whatever the row group's
// size. Both read every row back.
func TestWholeColumnChunks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rows     int64
		rowGroup int64
		buffered bool
	}{
		{"small chunks", 20_000, 5_000, false},
		// 200k int64 ids uncompressed: a 1.6 MB chunk, over the 1 MiB buffer.
		{"a chunk over the buffer", 200_000, 200_000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d", "part-0.parquet")
			writeArrowFile(t, path, 0, tc.rows, tc.rowGroup, pq.WithCompression(compress.Codecs.Uncompressed), pq.WithDictionaryDefault(false))
			src := mustNew(t, filepath.Dir(path))
			plans := mustPlan(t, src, tc.rows)
			if len(plans) != 1 {
				t.Fatalf("%d shards, want 1", len(plans))
			}
			br, err := src.Open(context.Background(), plans[0].Plan, sources.ReadOptions{BatchSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			if got := br.(*reader).of.props.BufferedStreamEnabled; got != tc.buffered {
				t.Errorf("buffered stream %v, want %v", got, tc.buffered)
			}
			br.Close()
			recs := readShards(t, src, plans, sources.ReadOptions{BatchSize: 4096})
			defer releaseAll(recs)
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
