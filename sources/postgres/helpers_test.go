package postgres

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

func TestMain(m *testing.M) { testservers.Main(m) }

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newSource builds a source over pg and fails the test on error.
func newSource(t testing.TB, pg *testservers.PG, query, shardBy string, opts ...Option) *Source {
	t.Helper()
	s, err := New(testCtx(t), jobs.PostgresSourceSpec{DSN: pg.DSN, Query: query, ShardBy: shardBy}, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", query, err)
	}
	return s
}

func plan(t testing.TB, s *Source, rowsPerShard int64) []sources.ShardPlan {
	t.Helper()
	plans, err := s.Plan(testCtx(t), rowsPerShard)
	if err != nil {
		t.Fatalf("Plan(%d): %v", rowsPerShard, err)
	}
	return plans
}

// readAll streams one shard and returns its batches (caller releases).
func readAll(t testing.TB, s *Source, sp sources.ShardPlan, cols []string, batch int) []arrow.RecordBatch {
	t.Helper()
	ctx := testCtx(t)
	r, err := s.Open(ctx, sp.Plan, sources.ReadOptions{Columns: cols, BatchSize: batch})
	if err != nil {
		t.Fatalf("Open(%s): %v", sp.Desc, err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close(%s): %v", sp.Desc, err)
		}
	}()
	var out []arrow.RecordBatch
	for {
		rec, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next(%s): %v", sp.Desc, err)
		}
		out = append(out, rec)
	}
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// int64s returns column c of every batch as int64 values (any integer width),
// with ok=false for nulls.
func int64s(t testing.TB, recs []arrow.RecordBatch, c int) (vals []int64, valid []bool) {
	t.Helper()
	for _, rec := range recs {
		switch a := rec.Column(c).(type) {
		case *array.Int64:
			for i := 0; i < a.Len(); i++ {
				vals, valid = append(vals, a.Value(i)), append(valid, a.IsValid(i))
			}
		case *array.Int32:
			for i := 0; i < a.Len(); i++ {
				vals, valid = append(vals, int64(a.Value(i))), append(valid, a.IsValid(i))
			}
		case *array.Int16:
			for i := 0; i < a.Len(); i++ {
				vals, valid = append(vals, int64(a.Value(i))), append(valid, a.IsValid(i))
			}
		default:
			t.Fatalf("column %d is %s, want an integer", c, rec.Column(c).DataType())
		}
	}
	return vals, valid
}
