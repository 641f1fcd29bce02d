package postgres

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// partitionView is one reader statement's view of a date: rows per
// model_version and their key range.
type partitionView struct {
	models      int
	model       string
	rows        int
	first, last int64
}

// wholeView is what a reader sees of the complete rows [from, to) of run.
func wholeView(t *testing.T, run sinks.RunInfo, from, to int) partitionView {
	p := partitionView{models: 1, model: sinktest.ModelVersion(run), rows: to - from, first: math.MaxInt64, last: math.MinInt64}
	for k := range sinktest.Want(run, from, to) {
		v, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		p.first, p.last = min(p.first, v), max(p.last, v)
	}
	return p
}

func readPartition(ctx context.Context, s *Sink, date string) (partitionView, error) {
	var p partitionView
	err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT model_version), COALESCE(min(model_version), ''), count(*),
		COALESCE(min(user_id), -1), COALESCE(max(user_id), -1) FROM `+s.ident(s.spec.Table)+` WHERE date = $1`, date).
		Scan(&p.models, &p.model, &p.rows, &p.first, &p.last)
	return p, err
}

// A reader polling an upsert table while a date is re-run, and after a
// re-run is interrupted, sees the whole old partition or the whole new
// one, never a mix.
func TestUpsertRerunAtomic(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeUpsert, "scores")
	defer s.Close()
	ctx := context.Background()
	date := map[string]string{"date": "2024-11-01"}
	run1 := sinktest.NewRun("v1", false, date)
	if err := s.Prepare(ctx, run1); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run1, 0, 0, 300, true)
	publish(t, s, run1)
	whole := map[string]partitionView{
		"model-v1": wholeView(t, run1, 0, 300),
		"model-v2": wholeView(t, sinktest.NewRun("v2", false, date), 100, 500),
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				p, err := readPartition(ctx, s, "2024-11-01")
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				reads.Add(1)
				if p != whole[p.model] {
					t.Errorf("reader %d saw a mixed or partial partition: %+v", r, p)
					return
				}
			}
		}()
	}
	// Re-run: v2 writes its shards slowly, then publishes.
	run2 := sinktest.NewRun("v2", false, date)
	if err := s.Prepare(ctx, run2); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		writeRows(t, s, run2, i, 100+i*100, 200+i*100, true)
		time.Sleep(20 * time.Millisecond)
	}
	publish(t, s, run2)
	// An interrupted re-run: shards written, then aborted; and one left
	// behind without Abort (its process died).
	for _, v := range []string{"v3", "v4"} {
		run := sinktest.NewRun(v, false, date)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, run, 0, 0, 50, true)
		time.Sleep(20 * time.Millisecond)
		if v == "v3" {
			if err := s.Abort(ctx, run); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if reads.Load() < 10 {
		t.Fatalf("only %d reads", reads.Load())
	}
	if p, err := readPartition(ctx, s, "2024-11-01"); err != nil || p != whole["model-v2"] {
		t.Fatalf("after the interrupted re-runs: %+v, %v", p, err)
	}
}

// writeAs writes rows of data (model_version "model-"+data.Version) as
// shard index of run.
func writeAs(t *testing.T, s *Sink, run, data sinks.RunInfo, shard, from, to int) {
	t.Helper()
	ctx := context.Background()
	w, err := s.Shard(ctx, run, shard)
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Batch(data, from, to)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	commits.record(s, run, shard, int64(to-from))
}

// model_version_in_key: two models' outputs for one date live side by side,
// and re-running one model replaces only its rows.
func TestUpsertModelVersionInKey(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	s, err := New(ctx, testJob, jobs.PostgresSinkSpec{DSN: pg.DSN, Table: "scores", Schema: "mv", Mode: ModeUpsert, ModelVersionInKey: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	date := map[string]string{"date": "2024-11-01"}
	a, b := sinktest.NewRun("a", false, date), sinktest.NewRun("b", false, date)
	for _, r := range []struct {
		run  sinks.RunInfo
		n    int
		data sinks.RunInfo
	}{{a, 100, a}, {b, 60, b}, {sinktest.NewRun("a2", false, date), 30, a}} {
		if err := s.Prepare(ctx, r.run); err != nil {
			t.Fatal(err)
		}
		writeAs(t, s, r.run, r.data, 0, 0, r.n)
		publish(t, s, r.run)
	}
	got := map[string]int{}
	rows, err := s.pool.Query(ctx, "SELECT model_version, count(*) FROM "+s.ident("scores")+" GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var mv string
		var n int
		if err := rows.Scan(&mv, &n); err != nil {
			t.Fatal(err)
		}
		got[mv] = n
	}
	if fmt.Sprint(got) != "map[model-a:30 model-b:60]" {
		t.Fatalf("rows per model: %v; want model-a re-run to 30 rows and model-b's 60 kept", got)
	}
	// Turning the option off for the same table is refused, not mixed.
	off, err := New(ctx, testJob, jobs.PostgresSinkSpec{DSN: pg.DSN, Table: "scores", Schema: "mv", Mode: ModeUpsert})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if err := off.Prepare(ctx, sinktest.NewRun("c", false, date)); err == nil {
		t.Fatal("Prepare with another primary key succeeded")
	}
}
