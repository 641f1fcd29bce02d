package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sinks"
)

const (
	benchRows  = 100_000
	benchBatch = 1024
	benchTopK  = 50
)

// benchRun is a recs-like output: the top-50 items and their scores per user.
func benchRun(version string) sinks.RunInfo {
	return sinks.RunInfo{
		Job: "bench", RunID: "run-" + version, Version: version, Key: "user_id",
		Params: map[string]string{"date": "2024-11-01"},
		Schema: arrow.NewSchema([]arrow.Field{
			{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "score", Type: arrow.PrimitiveTypes.Float32},
			{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
			{Name: "item_scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
			{Name: sinks.ColModelVersion, Type: arrow.BinaryTypes.String},
			{Name: sinks.ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
			{Name: "date", Type: arrow.BinaryTypes.String},
		}, nil),
	}
}

var benchAt = time.Date(2024, 11, 1, 12, 0, 0, 0, time.UTC)

func benchValues(i int) (items []int64, scores []float32) {
	items, scores = make([]int64, benchTopK), make([]float32, benchTopK)
	for j := range benchTopK {
		items[j] = int64((i*31 + j*17) % 5000)
		scores[j] = 1 / float32(j+1+i%7)
	}
	return items, scores
}

// benchBatches builds the payload as Arrow batches.
func benchBatches(run sinks.RunInfo) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for lo := 0; lo < benchRows; lo += benchBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, run.Schema)
		for i := lo; i < min(lo+benchBatch, benchRows); i++ {
			items, scores := benchValues(i)
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			b.Field(1).(*array.Float32Builder).Append(float32(i) / 3)
			lb := b.Field(2).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Int64Builder).AppendValues(items, nil)
			lb = b.Field(3).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Float32Builder).AppendValues(scores, nil)
			b.Field(4).(*array.StringBuilder).Append("model-abc123")
			b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(benchAt.UnixMicro()))
			b.Field(6).(*array.StringBuilder).Append("2024-11-01")
		}
		out = append(out, b.NewRecordBatch())
		b.Release()
	}
	return out
}

// BenchmarkCopy compares the sink's shard write (Shard, Write, Commit) with
// a raw pgx CopyFrom of the same rows into an identical table, from
// prebuilt [][]any rows (their building is not timed). Report the ratio of
// the rows/s metrics.
func BenchmarkCopy(b *testing.B) {
	pg := testservers.Postgres(b)
	ctx := context.Background()

	b.Run("sink", func(b *testing.B) {
		s := newSink(b, pg, ModeReplace, "bench")
		defer s.Close()
		batches := benchBatches(benchRun("v0"))
		defer func() {
			for _, r := range batches {
				r.Release()
			}
		}()
		b.ResetTimer()
		var elapsed time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			run := benchRun(fmt.Sprintf("v%d", i))
			if err := s.Prepare(ctx, run); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			w, err := s.Shard(ctx, run, 0)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range batches {
				if err := w.Write(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			elapsed += time.Since(start)
			b.StopTimer()
			if err := s.Abort(ctx, run); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(benchRows*b.N)/elapsed.Seconds(), "rows/s")
	})

	b.Run("raw_copyfrom", func(b *testing.B) {
		conn, err := pgx.Connect(ctx, pg.DSN)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS raw (user_id bigint, score real, items bigint[], item_scores real[],
			model_version text, computed_at timestamptz, date text, _shard integer NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		rows := make([][]any, benchRows)
		for i := range rows {
			items, scores := benchValues(i)
			rows[i] = []any{int64(i), float32(i) / 3, items, scores, "model-abc123", benchAt, "2024-11-01", int32(0)}
		}
		cols := []string{"user_id", "score", "items", "item_scores", "model_version", "computed_at", "date", "_shard"}
		b.ResetTimer()
		var elapsed time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			n, err := conn.CopyFrom(ctx, pgx.Identifier{"raw"}, cols, pgx.CopyFromRows(rows))
			if err != nil || n != benchRows {
				b.Fatalf("CopyFrom: %d rows, %v", n, err)
			}
			elapsed += time.Since(start)
			b.StopTimer()
			if _, err := conn.Exec(ctx, "TRUNCATE raw"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(benchRows*b.N)/elapsed.Seconds(), "rows/s")
	})
}
