package runner

import (
	"context"
	"path/filepath"
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
