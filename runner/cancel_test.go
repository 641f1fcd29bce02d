package runner

import (
	"context"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/runview"
)

// ledgerRun creates a run of n shards in led and commits the first done.
func ledgerRun(t *testing.T, led ledger.Ledger, id string, n, done int) {
	t.Helper()
	ctx := context.Background()
	run := jobs.Run{ID: id, Job: "j", Version: "v-" + id, ParamsKey: id, State: jobs.RunPending, Shards: n, CreatedAt: time.Now()}
	shards := make([]jobs.Shard, n)
	for i := range shards {
		shards[i] = jobs.Shard{RunID: id, Index: i, State: jobs.ShardPending, EstRows: 10}
	}
	if err := led.CreateRun(ctx, run, shards); err != nil {
		t.Fatal(err)
	}
	for i := range done {
		sh, err := led.Claim(ctx, id, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: id, Shard: sh.Index, Worker: "w", Counts: jobs.Counts{RowsIn: 10}}); err != nil {
			t.Fatalf("complete shard %d: %v", i, err)
		}
	}
}

// view reads run id's view from led.
func view(t *testing.T, led ledger.Ledger, id string) runview.Run {
	t.Helper()
	ctx := context.Background()
	r, err := led.Run(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := led.Shards(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return runview.From(r, shards)
}

// TestCancelledShardsCounted: after a cancel, the shards it stopped are
// counted cancelled, not failed; a shard that failed before the cancel
// stays failed; a failed run shows none running or pending (issue 31.12:
// "8 committed, 0 running, 0 pending, 12 failed" after a cancel, and a
// failed run with "1 running, 8 pending").
func TestCancelledShardsCounted(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()

	ledgerRun(t, led, "c", 20, 8)
	sh, err := led.Claim(ctx, "c", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: "c", Shard: sh.Index, Worker: "w", Msg: "bad input", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := led.Claim(ctx, "c", "w", time.Minute); err != nil { // one running at the cancel
		t.Fatal(err)
	}
	if _, err := Cancel(ctx, led, "c", CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	got := view(t, led, "c").Shards
	want := runview.ShardCounts{Committed: 8, Failed: 1, Cancelled: 11}
	if got != want {
		t.Fatalf("cancelled run's shards %+v, want %+v", got, want)
	}

	ledgerRun(t, led, "f", 10, 1)
	if _, err := led.Claim(ctx, "f", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := led.SetRunState(ctx, "f", jobs.RunFailed, "publish failed"); err != nil {
		t.Fatal(err)
	}
	got = view(t, led, "f").Shards
	if want := (runview.ShardCounts{Committed: 1, Cancelled: 9}); got != want {
		t.Fatalf("failed run's shards %+v, want %+v", got, want)
	}
}
