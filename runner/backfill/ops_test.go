package backfill

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner"
)

// TestCancelAndRunsOf: Find tells a backfill from a run id; Cancel marks
// the backfill cancelled and returns only its values' open runs (a
// succeeded value is left alone); RunsOf lists every value's runs newest
// first.
func TestCancelAndRunsOf(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	t0 := time.Now().Add(-time.Hour)
	var add []ledger.BackfillRun
	for i, v := range []string{"2026-11-01", "2026-11-02", "2026-11-03"} {
		id := "r" + v
		add = append(add, ledger.BackfillRun{Value: v,
			Run:    jobs.Run{ID: id, Job: "j", Version: "v" + v, ParamsKey: "date=" + v, State: jobs.RunPending, Shards: 1, CreatedAt: t0.Add(time.Duration(i) * time.Minute)},
			Shards: []jobs.Shard{{RunID: id, State: jobs.ShardPending}}})
	}
	b := ledger.Backfill{ID: "j-bf-1", Job: "j", Param: "date", From: "2026-11-01", To: "2026-11-03", Step: "1d", Parallel: 1}
	if err := led.CreateBackfill(ctx, b, add); err != nil {
		t.Fatal(err)
	}
	if err := led.SetRunState(ctx, "r2026-11-02", jobs.RunSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := Find(ctx, led, "r2026-11-01"); ok || err != nil {
		t.Errorf("Find(a run id) = %v, %v; want not a backfill", ok, err)
	}
	bl, got, ok, err := Find(ctx, led, b.ID)
	if !ok || err != nil || len(got.Dates) != 3 {
		t.Fatalf("Find(%s) = %+v, %v, %v", b.ID, got, ok, err)
	}
	runs, err := RunsOf(ctx, bl, got)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	if want := []string{"r2026-11-03", "r2026-11-02", "r2026-11-01"}; !slices.Equal(ids, want) {
		t.Errorf("RunsOf = %v, want %v (newest first)", ids, want)
	}
	open, err := Cancel(ctx, bl, got)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"r2026-11-01", "r2026-11-03"}; !slices.Equal(open, want) {
		t.Errorf("Cancel returned %v, want the open runs %v", open, want)
	}
	if after, err := bl.Backfill(ctx, b.ID); err != nil || !after.Cancelled {
		t.Errorf("after Cancel the backfill is %+v, %v; want cancelled", after, err)
	}
}

// TestByIDNotFound: RunsByID and Retry of an id that names no backfill
// are ledger.ErrNotFound naming it (the dashboard's Retry tells it from a
// failure); RunsByID of a backfill lists its runs.
func TestByIDNotFound(t *testing.T) {
	ctx := context.Background()
	led := boltLedger(t, t.TempDir())
	b := seedBackfill(t, led, "j-bf-1", "2026-11-01", "2026-11-02")
	if rs, err := RunsByID(ctx, led, b.ID); err != nil || len(rs) != 2 || rs[0].ID != "r2026-11-02" {
		t.Errorf("RunsByID = %v, %v; want both runs, newest first", rs, err)
	}
	if _, err := RunsByID(ctx, led, "nope"); !errors.Is(err, ledger.ErrNotFound) || !strings.Contains(err.Error(), "backfill nope") {
		t.Errorf("RunsByID(nope) = %v", err)
	}
	if _, err := Retry(ctx, led, "nope", nil, nil); !errors.Is(err, ledger.ErrNotFound) || !strings.Contains(err.Error(), "backfill nope") {
		t.Errorf("Retry(nope) = %v", err)
	}
}

// TestRunLocalReportsEveryValueDone: RunLocal hands OnDone every value's
// final result, those that needed no run (ended before) included, and
// OnRangeProgress the range's progress, which counts them done (RangeProgress.Finish was called by
// no one: "backfill 0/3 done" until the end).
func TestRunLocalReportsEveryValueDone(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	var add []ledger.BackfillRun
	values := []string{"2026-11-01", "2026-11-02", "2026-11-03"}
	for i, v := range values {
		id := "r" + v
		add = append(add, ledger.BackfillRun{Value: v,
			Run:    jobs.Run{ID: id, Job: "j", Version: "v" + v, ParamsKey: "date=" + v, State: jobs.RunPending, Shards: 1, CreatedAt: time.Now().Add(time.Duration(i-10) * time.Minute)},
			Shards: []jobs.Shard{{RunID: id, State: jobs.ShardPending}}})
	}
	b := ledger.Backfill{ID: "j-bf-1", Job: "j", Param: "date", From: values[0], To: values[2], Step: "1d", Parallel: 1}
	if err := led.CreateBackfill(ctx, b, add); err != nil {
		t.Fatal(err)
	}
	// Two values ended before this process; the third has no spec loaded.
	for _, v := range values[:2] {
		if err := led.SetRunState(ctx, "r"+v, jobs.RunSucceeded, ""); err != nil {
			t.Fatal(err)
		}
	}
	_, got, _, err := Find(ctx, led, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	var done []string
	var last runner.Progress
	RunLocal(ctx, led, got, map[string]*jobs.Spec{}, LocalOptions{OnDone: func(r ValueResult) {
		done = append(done, r.Value)
	}, OnRangeProgress: func(p runner.Progress) { last = p }})
	if !slices.Equal(done, values) {
		t.Fatalf("OnDone saw %v, want every value %v", done, values)
	}
	if !strings.HasPrefix(last.RunID, "backfill 3/3 done") {
		t.Errorf("the range's progress after every value: %q, want 3/3 done", last.RunID)
	}
}
