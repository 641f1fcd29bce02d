package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/runview"
)

// TestRunView: a run of a backfill names it; an embedded-ledger run that
// says running with no process and no live lease is shown interrupted
// with the command that resumes it (the state dir named when it is not
// the default); the Postgres ledger's view ("" state dir) is never
// interrupted by this host's records.
func TestRunView(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	led, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	run := jobs.Run{ID: "r1", Job: "j", Version: "v1", ParamsKey: "date=2026-11-01", Params: map[string]string{"date": "2026-11-01"},
		State: jobs.RunPending, Shards: 1, CreatedAt: time.Now(), SpecFile: "job.yaml"}
	err = led.CreateBackfill(ctx, ledger.Backfill{ID: "j-bf-1", Job: "j", Param: "date", From: "2026-11-01", To: "2026-11-01", Step: "1d", Parallel: 1},
		[]ledger.BackfillRun{{Value: "2026-11-01", Run: run, Shards: []jobs.Shard{{RunID: "r1", State: jobs.ShardPending}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := led.SetRunState(ctx, "r1", jobs.RunRunning, ""); err != nil {
		t.Fatal(err)
	}
	r := readRun(t, led, "r1")
	shards, err := led.Shards(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	v, err := RunView(ctx, led, dir, r, shards, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := "precog --state-dir " + dir + " run job.yaml --param date=2026-11-01"; v.Backfill != "j-bf-1" || v.State != runview.StateInterrupted || v.Resume != want {
		t.Errorf("local view: backfill %q state %q resume %q; want j-bf-1, interrupted, %q", v.Backfill, v.State, v.Resume, want)
	}
	v, err = RunView(ctx, led, "", r, shards, time.Now())
	if err != nil || v.State != string(jobs.RunRunning) || v.Backfill != "j-bf-1" {
		t.Errorf("cluster view: %q, %q, %v; want running in j-bf-1", v.State, v.Backfill, err)
	}
}

// TestEachReject: a run's stored rejects stream page by page in order, at
// most limit of them, with how many the ledger stores.
func TestEachReject(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	ledgerRun(t, led, "r", 2, 0)
	for i := range 2 {
		sh, err := led.Claim(ctx, "r", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var sample []jobs.Reject
		for k := range 3 {
			sample = append(sample, jobs.Reject{Shard: sh.Index, Key: fmt.Sprintf("k%d-%d", i, k), Reason: "bad"})
		}
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: "r", Shard: sh.Index, Worker: "w", Counts: jobs.Counts{RowsIn: 10, Rejected: 3}, Sample: sample}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	n, stored, _, err := EachReject(ctx, led, "r", 0, func(r jobs.Reject) error { keys = append(keys, r.Key); return nil })
	if err != nil || n != 6 || stored != 6 || len(keys) != 6 {
		t.Fatalf("EachReject = %d of %d stored, %v: %v", n, stored, err, keys)
	}
	keys = nil
	if n, _, _, err := EachReject(ctx, led, "r", 4, func(r jobs.Reject) error { keys = append(keys, r.Key); return nil }); err != nil || n != 4 || len(keys) != 4 {
		t.Errorf("EachReject with limit 4 = %d, %v: %v", n, err, keys)
	}
}

// TestRunFailure: a failed run's error names the run's error and its
// first failed shards, then points at precog status for the rest.
func TestRunFailure(t *testing.T) {
	r := jobs.Run{ID: "r", State: jobs.RunFailed, Error: "3 shards failed"}
	var shards []jobs.Shard
	for i := range runview.DefaultMaxFailed + 2 {
		shards = append(shards, jobs.Shard{Index: i, State: jobs.ShardFailed, Attempts: 2, Error: "boom"}, jobs.Shard{Index: 100 + i, State: jobs.ShardCommitted})
	}
	msg := RunFailure(r, shards).Error()
	if !strings.HasPrefix(msg, "run r failed: 3 shards failed\n  shard 0 (2 attempts): boom") || strings.Count(msg, "attempts)") != runview.DefaultMaxFailed ||
		!strings.HasSuffix(msg, "… more failed shards: precog status r") {
		t.Errorf("RunFailure:\n%s", msg)
	}
}

// TestSnapshotProgress: rows and shards done from the ledger, the total
// from the shards' estimates, the ETA from the rate.
func TestSnapshotProgress(t *testing.T) {
	s := ledger.RunSnapshot{Run: jobs.Run{ID: "r", Counts: jobs.Counts{RowsIn: 100}}, Rate: 50,
		Shards: []jobs.Shard{{State: jobs.ShardCommitted, EstRows: 100}, {State: jobs.ShardRunning, EstRows: 200}}}
	p := SnapshotProgress(s, time.Now())
	if p.RowsDone != 100 || p.RowsTotal != 300 || p.ShardsDone != 1 || p.ShardsTotal != 2 || p.ETA != 4*time.Second {
		t.Errorf("SnapshotProgress = %+v, want 100/300 rows, 1/2 shards, ETA 4s", p)
	}
}
