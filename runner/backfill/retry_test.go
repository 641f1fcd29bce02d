package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sources"
)

// keptValues are the values of the retry test's backfill, in order, by
// what their runs did before the retry.
var keptValues = struct{ running, kept1, kept2, removed, cancelled, cleaning string }{
	"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05", "2026-11-06"}

// seedRetryBackfill creates a backfill of the six keptValues (Parallel 2,
// three shards each, the spec recorded) on led, and brings their runs to
// the states they are named for, as workers would: the first runs its
// shards (in flight); a failed run has shards 0 and 1 committed by w1 and
// shard 2 out of attempts, its staged data kept (a pending cleanup due in
// an hour, as a worker records it), removed (none), or being removed (the
// cleanup due and claimed by w9).
func seedRetryBackfill(t *testing.T, led ledger.Store) ledger.Backfill {
	t.Helper()
	ctx := context.Background()
	v := keptValues
	values := []string{v.running, v.kept1, v.kept2, v.removed, v.cancelled, v.cleaning}
	b := ledger.Backfill{ID: "scores-bf-1", Job: "scores", Param: "dt", From: values[0], To: values[len(values)-1], Step: "1d", Parallel: 2, Priority: -1, Pool: "default"}
	if err := led.CreateBackfill(ctx, b, retryChildren(values)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := led.Claim(ctx, "r"+v.running, "w0", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, val := range []string{v.kept1, v.kept2, v.removed, v.cleaning} {
		failOutOfAttempts(t, led, "r"+val)
	}
	for val, dueIn := range map[string]time.Duration{v.kept1: time.Hour, v.kept2: time.Hour, v.cleaning: 0} {
		if err := led.AddCleanup(ctx, ledger.CleanupParams{RunID: "r" + val, Reason: "failed; staged data kept for retry.keep_failed 1h", DueIn: dueIn}); err != nil {
			t.Fatal(err)
		}
	}
	if err := led.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: "r" + v.cleaning, Holder: "w9", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	setState(t, led, "r"+v.cancelled, jobs.RunCancelled, "cancelled by test")
	got, err := led.Backfill(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// retryChildren are the runs of values in a backfill of the scores job
// (backfillSpec recorded), three shards each, created a minute apart an
// hour ago.
func retryChildren(values []string) []ledger.BackfillRun {
	t0 := time.Now().Add(-time.Hour)
	var add []ledger.BackfillRun
	for i, val := range values {
		params := map[string]string{"dt": val}
		r := jobs.Run{ID: "r" + val, Job: "scores", Version: "v" + val, Params: params, ParamsKey: jobs.ParamsKey(params), State: jobs.RunPending,
			Shards: 3, Pool: "default", Priority: -1, CreatedAt: t0.Add(time.Duration(i) * time.Minute), Spec: []byte(backfillSpec), SpecFile: "/jobs/job.yaml"}
		var shards []jobs.Shard
		for s := range 3 {
			shards = append(shards, jobs.Shard{RunID: r.ID, Index: s, Plan: json.RawMessage(`{}`), EstRows: 100})
		}
		add = append(add, ledger.BackfillRun{Value: val, Run: r, Shards: shards})
	}
	return add
}

// failOutOfAttempts commits shards 0 and 1 of run id as w1, fails shard 2
// out of attempts and the run with it.
func failOutOfAttempts(t *testing.T, led Ledger, id string) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		s, err := led.Claim(ctx, id, "w1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: id, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 100, RowsOut: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := led.Claim(ctx, id, "w1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: id, Shard: s.Index, Worker: "w1", Msg: "redis: i/o timeout", Retry: true, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	setState(t, led, id, jobs.RunFailed, "shard 2 out of attempts")
}

// claimIn claims the next shard of the pool as worker and returns its run
// ("" when nothing is claimable). A straggler's speculative second lease
// (a run already in flight) is passed over.
func claimIn(t *testing.T, led ledger.Store, worker string) string {
	t.Helper()
	for range 10 {
		r, s, err := led.ClaimNext(context.Background(), ledger.ClaimNextParams{Pool: "default", Worker: worker, Lease: time.Hour})
		if errors.Is(err, ledger.ErrNoShard) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		if !s.Speculative {
			return r.ID
		}
	}
	t.Fatal("10 speculative claims in a row")
	return ""
}

// finishRun commits every leased shard of run id and publishes it.
func finishRun(t *testing.T, led ledger.Store, id string) {
	t.Helper()
	ctx := context.Background()
	shards, err := led.Shards(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		if s.State != jobs.ShardRunning {
			continue
		}
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: id, Shard: s.Index, Worker: s.Worker, Counts: jobs.Counts{RowsIn: 100, RowsOut: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: id, Worker: "pub", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := led.FinishPublish(ctx, ledger.FinishPublishParams{RunID: id, Worker: "pub", State: jobs.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
}

// TestRetryResumesKeptRuns: precog retry BACKFILL on the Postgres ledger
// takes each failed value whose staged data is still kept back up as the
// same run (its committed shards as they were: same worker, same
// UpdatedAt; its pending cleanup gone), and gives a new run to a failed
// value whose data was removed, a cancelled one and one whose data a
// worker is removing now; it says which, value by value. The reopened runs
// wait for the --parallel bound like new ones: with 2 allowed and one
// value in flight, only the first reopened run is claimable, and each
// value that ends admits the next one in value order. (Before, every
// failed value got a new run, its committed shards recomputed.)
func TestRetryResumesKeptRuns(t *testing.T) {
	ctx := context.Background()
	led := pgLedger(t)
	v := keptValues
	b := seedRetryBackfill(t, led)
	before := map[string][]jobs.Shard{}
	var err error
	for _, val := range []string{v.kept1, v.kept2} {
		if before[val], err = led.Shards(ctx, "r"+val); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Retry(ctx, led, b.ID, nil, planOneShard)
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	after, err := led.Backfill(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	current := map[string]string{}
	for _, d := range after.Dates {
		current[d.Value] = d.Run()
		wantRuns := 2
		if d.Value == v.running || d.Value == v.kept1 || d.Value == v.kept2 {
			wantRuns = 1
		}
		if len(d.Runs) != wantRuns {
			t.Errorf("%s has runs %v, want %d", d.Value, d.Runs, wantRuns)
		}
	}
	want := fmt.Sprintf(`backfill scores-bf-1: 5 value(s) retried
  2026-11-02: resumed run r2026-11-02 (staged data kept: committed shards are not recomputed)
  2026-11-03: resumed run r2026-11-03 (staged data kept: committed shards are not recomputed)
  2026-11-04: new run %s
  2026-11-05: new run %s
  2026-11-06: new run %s (a worker is removing the staged data run r2026-11-06 kept)`, current[v.removed], current[v.cancelled], current[v.cleaning])
	if got := res.String(); got != want {
		t.Errorf("Retry said:\n%s\nwant:\n%s", got, want)
	}
	if got, want := fmt.Sprint(res.New()), fmt.Sprint([]string{v.removed, v.cancelled, v.cleaning}); got != want {
		t.Errorf("New() = %s, want %s", got, want)
	}
	for _, val := range []string{v.kept1, v.kept2} {
		id := "r" + val
		r, err := led.Run(ctx, id)
		if err != nil || r.State != jobs.RunRunning {
			t.Fatalf("%s after the retry: %s, %v; want running", id, r.State, err)
		}
		shards, err := led.Shards(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range shards {
			old := before[val][i]
			switch {
			case old.State == jobs.ShardCommitted && (s.State != jobs.ShardCommitted || s.Worker != old.Worker || !s.UpdatedAt.Equal(old.UpdatedAt)):
				t.Errorf("%s shard %d: %s by %q at %s; want committed by %s at %s as before (not recomputed)", id, i, s.State, s.Worker, s.UpdatedAt, old.Worker, old.UpdatedAt)
			case old.State == jobs.ShardFailed && (s.State != jobs.ShardPending || s.Attempts != 0):
				t.Errorf("%s shard %d: %s after %d attempts; want pending, attempts reset", id, i, s.State, s.Attempts)
			}
		}
		if _, err := led.PendingCleanup(ctx, id); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s's pending cleanup after the retry: %v; want taken back (none)", id, err)
		}
	}
	if c, err := led.PendingCleanup(ctx, "r"+v.cleaning); err != nil || c.Holder != "w9" {
		t.Errorf("the cleanup w9 holds: %+v, %v; want it left to w9", c, err)
	}

	// The bound: 2 in flight. The running value and the first reopened one
	// are; the second reopened one waits.
	if got := claimIn(t, led, "w2"); got != "r"+v.kept1 {
		t.Fatalf("first claim after the retry went to %q, want the first reopened run r%s", got, v.kept1)
	}
	if got := claimIn(t, led, "w3"); got != "" {
		t.Fatalf("claim with 2 of 2 values in flight went to %s, want nothing (the second reopened run waits)", got)
	}
	// Each value that ends admits the next, in value order.
	for _, step := range []struct{ end, next string }{
		{"r" + v.running, "r" + v.kept2}, {"r" + v.kept1, current[v.removed]}, {"r" + v.kept2, current[v.cancelled]},
	} {
		finishRun(t, led, step.end)
		if got := claimIn(t, led, "w4"); got != step.next {
			t.Fatalf("after %s ended the claim went to %q, want %s", step.end, got, step.next)
		}
		if got := claimIn(t, led, "w5"); got != "" {
			t.Fatalf("after %s ended a second claim went to %s: more than 2 values in flight", step.end, got)
		}
	}
}

// TestRetryEmbeddedNewRuns: on the embedded ledger, which keeps no staged
// data of a failed run, Retry gives a failed and a cancelled value new runs
// (as before) and says so value by value; a succeeded value is left alone.
func TestRetryEmbeddedNewRuns(t *testing.T) {
	ctx := context.Background()
	led := boltLedger(t, t.TempDir())
	values := []string{"2026-11-01", "2026-11-02", "2026-11-03"}
	b := ledger.Backfill{ID: "scores-bf-1", Job: "scores", Param: "dt", From: values[0], To: values[2], Step: "1d", Parallel: 1}
	if err := led.CreateBackfill(ctx, b, retryChildren(values)); err != nil {
		t.Fatal(err)
	}
	failOutOfAttempts(t, led, "r"+values[0])
	setState(t, led, "r"+values[1], jobs.RunCancelled, "cancelled by test")
	setState(t, led, "r"+values[2], jobs.RunSucceeded, "")
	res, err := Retry(ctx, led, b.ID, nil, planOneShard)
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	after, err := led.Backfill(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("backfill scores-bf-1: 2 value(s) retried\n  2026-11-01: new run %s\n  2026-11-02: new run %s", after.Dates[0].Run(), after.Dates[1].Run())
	if got := res.String(); got != want || len(after.Dates[0].Runs) != 2 || len(after.Dates[1].Runs) != 2 || len(after.Dates[2].Runs) != 1 {
		t.Errorf("Retry said:\n%s\nwant:\n%s\ndates %+v", got, want, after.Dates)
	}
	if got := fmt.Sprint(res.New()); got != fmt.Sprint(values[:2]) {
		t.Errorf("New() = %s, want %v", got, values[:2])
	}
}

// planOneShard plans every retried value as one 100-row shard of model
// version v2 (Retry's planner, without a spec to load).
func planOneShard(context.Context, *jobs.Spec) (string, []sources.ShardPlan, error) {
	return "v2", []sources.ShardPlan{{Plan: json.RawMessage(`{}`), Rows: 100}}, nil
}
