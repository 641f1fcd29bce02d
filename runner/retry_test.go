package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// failShard claims a pending shard of run id and fails it for good.
func failShard(t *testing.T, led ledger.Ledger, id string) {
	t.Helper()
	ctx := context.Background()
	sh, err := led.Claim(ctx, id, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: id, Shard: sh.Index, Worker: "w", Msg: "bad input", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
}

func readRun(t *testing.T, led ledger.Ledger, id string) jobs.Run {
	t.Helper()
	r, err := led.Run(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRetryEmbedded: on the embedded ledger without Resume (the
// dashboard's button), an open run's failed shard goes back to pending and
// the message says who executes it; a finished run is refused, with or
// without Resume, and nothing changes.
func TestRetryEmbedded(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	ledgerRun(t, led, "a", 3, 1)
	failShard(t, led, "a")
	res, err := Retry(ctx, RetryParams{Ledger: led, Run: readRun(t, led, "a")})
	if err != nil || res.Reopened != 1 {
		t.Fatalf("Retry = %+v, %v; want 1 shard reopened", res, err)
	}
	if got := view(t, led, "a").Shards; got.Failed != 0 || got.Pending != 2 {
		t.Errorf("after retry: %+v, want the failed shard pending", got)
	}
	if want := "run a: 1 failed shard(s) back to pending; the next precog run of the job (or precog retry a) executes them"; res.String() != want {
		t.Errorf("message %q, want %q", res.String(), want)
	}

	ledgerRun(t, led, "b", 2, 0)
	failShard(t, led, "b")
	if err := led.SetRunState(ctx, "b", jobs.RunFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	var ref *RefusedError
	for _, resume := range []*LocalOptions{nil, {Parallel: 1}} {
		_, err := Retry(ctx, RetryParams{Ledger: led, Run: readRun(t, led, "b"), Resume: resume})
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), "run b is failed") {
			t.Errorf("retry of a failed run (resume %v) = %v, want a *RefusedError", resume != nil, err)
		}
	}
	if got := view(t, led, "b").Shards; got.Failed != 1 {
		t.Errorf("a refused retry changed the shards: %+v", got)
	}
}

// TestRetrySuperseded: a cluster retry of a run whose job and params have
// a newer succeeded run is refused (readers see the newer results), unless
// forced; a cancelled run is refused with the command that submits it again.
func TestRetrySuperseded(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	t0 := time.Now().Add(-time.Minute)
	for i, id := range []string{"old", "new"} {
		run := jobs.Run{ID: id, Job: "j", Version: "v-" + id, ParamsKey: "p", State: jobs.RunPending, Shards: 1, CreatedAt: t0.Add(time.Duration(i) * time.Second), SpecFile: "job.yaml"}
		if err := led.CreateRun(ctx, run, []jobs.Shard{{RunID: id, State: jobs.ShardPending}}); err != nil {
			t.Fatal(err)
		}
		state := jobs.RunFailed
		if id == "new" {
			state = jobs.RunSucceeded
		}
		if err := led.SetRunState(ctx, id, state, ""); err != nil {
			t.Fatal(err)
		}
	}
	old := readRun(t, led, "old")
	var ref *RefusedError
	if _, err := Retry(ctx, RetryParams{Ledger: led, Run: old, Cluster: true}); !errors.As(err, &ref) || !strings.Contains(err.Error(), "superseded: the newer run new") {
		t.Errorf("retry of a superseded run = %v, want a *RefusedError naming the newer run", err)
	}
	// Forced, it gets to the ledger (which cannot reopen a failed run).
	if _, err := Retry(ctx, RetryParams{Ledger: led, Run: old, Cluster: true, Force: true}); err == nil || errors.As(err, &ref) || !strings.Contains(err.Error(), "precog submit job.yaml") {
		t.Errorf("forced retry = %v, want the ledger's refusal to reopen, naming the submit command", err)
	}
	if err := led.CreateRun(ctx, jobs.Run{ID: "c", Job: "k", Version: "v-c", ParamsKey: "q", State: jobs.RunPending, Shards: 1, CreatedAt: time.Now(), SpecFile: "my job.yaml", Params: map[string]string{"date": "2026-11-01"}},
		[]jobs.Shard{{RunID: "c", State: jobs.ShardPending}}); err != nil {
		t.Fatal(err)
	}
	if err := led.SetRunState(ctx, "c", jobs.RunCancelled, ""); err != nil {
		t.Fatal(err)
	}
	_, err = Retry(ctx, RetryParams{Ledger: led, Run: readRun(t, led, "c"), Cluster: true})
	if !errors.As(err, &ref) || !strings.Contains(err.Error(), "precog submit 'my job.yaml' --param date=2026-11-01") {
		t.Errorf("retry of a cancelled run = %v, want a *RefusedError with the submit command", err)
	}
}
