package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks"
)

// keptCase runs spec (six 500-row shards into Parquet, two attempts each)
// on one worker of a cluster ledger whose shard 3 fails every attempt
// until healed, so the run fails with shards out of attempts. It returns
// the ledger, the failed run, the sink (attempts per shard) and heal.
func keptCase(t *testing.T, keep time.Duration) (led ledger.Store, spec *jobs.Spec, run jobs.Run, fs *faultSink, heal func()) {
	t.Helper()
	dir, _ := fixture(t, dataset)
	// The worker reads the spec the run recorded: keep_failed goes in the file.
	path := filepath.Join(dir, "job.yaml")
	body := strings.Replace(string(mustRead(t, path)), "retry: { max_attempts: 2 }", fmt.Sprintf("retry: { max_attempts: 2, keep_failed: %s }", keep), 1)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Load(path, nil)
	if err != nil || spec.Retry.KeepFailed.Duration != keep {
		t.Fatalf("spec with keep_failed %s: %v, %v", keep, spec, err)
	}
	var healed atomic.Bool
	fs = &faultSink{Sink: parquetSink(t, spec), failWrite: func(shard, _ int) bool { return shard == 3 && !healed.Load() }}
	pl := clusterLedger(t)
	run = submit(t, pl, spec)
	w := NewWorker(pl, WorkerOptions{ID: "w0", StateDir: t.TempDir(), Lease: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	w.runs.openSinks = func(context.Context, *jobs.Spec) ([]sinks.Sink, error) { return []sinks.Sink{keepOpen{fs}}, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	if got := waitRun(t, pl, run.ID, 2*time.Minute); got.State != jobs.RunFailed {
		t.Fatalf("run %s, want failed (shard 3 out of attempts)", got.State)
	}
	return pl, spec, run, fs, func() { healed.Store(true) }
}

// staged counts the files in the Parquet sink's staging directories.
func staged(t *testing.T, spec *jobs.Spec) int {
	t.Helper()
	p := spec.Sinks.Parquet.Path
	files, err := filepath.Glob(filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".precog-*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(files)
}

// committedAttempts maps each committed shard of runID to its attempts in fs.
func committedAttempts(t *testing.T, led ledger.Ledger, runID string, fs *faultSink) map[int]int {
	t.Helper()
	shards, err := led.Shards(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := map[int]int{}
	for _, s := range shards {
		if s.State == jobs.ShardCommitted {
			out[s.Index] = fs.attempts[s.Index]
		}
	}
	return out
}

// retryToSuccess retries the failed run as precog retry does and waits
// for it to succeed with the whole output published.
func retryToSuccess(t *testing.T, led ledger.Store, spec *jobs.Spec, run jobs.Run) RetryResult {
	t.Helper()
	res, err := Retry(context.Background(), RetryParams{Ledger: led, Run: mustRun(t, led, run.ID), Cluster: true})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := waitRun(t, led, run.ID, 2*time.Minute); got.State != jobs.RunSucceeded {
		t.Fatalf("retried run %s (%s), want succeeded", got.State, got.Error)
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys, want 3000", len(rows))
	}
	return res
}

// TestFailedClusterRunKeepsStagedData: a cluster run whose shard ran out
// of attempts fails, but its sinks keep the committed shards' staged data
// for retry.keep_failed (a pending cleanup due in an hour; status says
// until when; precog gc keeps it), and precog retry takes it back up: no
// committed shard is executed again, and the output is exact. (Aborting at once, as before,
// made the retry recompute every committed shard: retry.keep_failed: 0
// still does, which the last check pins.)
func TestFailedClusterRunKeepsStagedData(t *testing.T) {
	led, spec, run, fs, heal := keptCase(t, time.Hour)
	ctx := context.Background()
	before := committedAttempts(t, led, run.ID, fs)
	if len(before) == 0 || staged(t, spec) < len(before) {
		t.Fatalf("failed run: %d committed shards, %d staged files; want the committed shards' files kept", len(before), staged(t, spec))
	}
	c, err := led.PendingCleanup(ctx, run.ID)
	if err != nil || time.Until(c.DueAt) < 50*time.Minute {
		t.Fatalf("pending cleanup of the failed run = %+v, %v; want one due in an hour", c, err)
	}
	v, err := RunView(ctx, led, "", mustRun(t, led, run.ID), nil, time.Now())
	if err != nil || v.StagedKeptUntil == "" || v.StagedRemoved {
		t.Fatalf("view of the failed run: %+v, %v; want its staged data kept until a time", v, err)
	}
	rep, err := GC(ctx, spec, led, GCOptions{})
	if err != nil {
		t.Fatalf("gc: %v", err)
	}
	seen := 0
	for _, e := range rep.Entries {
		if e.RunID != run.ID {
			continue
		}
		seen++
		if e.Action != GCKept || !strings.Contains(e.Reason, "keeps it for a retry until") {
			t.Errorf("gc of the failed run's kept data: %+v, want kept for the retry", e)
		}
	}
	if seen == 0 {
		t.Errorf("gc listed nothing of the failed run: %+v", rep.Entries)
	}
	heal()
	if res := retryToSuccess(t, led, spec, run); !res.Kept {
		t.Errorf("retry result %+v: want Kept (%s)", res, res)
	}
	for i, n := range committedAttempts(t, led, run.ID, fs) {
		if _, was := before[i]; was && n != before[i] {
			t.Errorf("shard %d, committed before the failure, was attempted %d times, was %d: recomputed", i, n, before[i])
		}
	}
	if _, err := led.PendingCleanup(ctx, run.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("pending cleanup after the retry: %v, want none", err)
	}
}

// TestFailedClusterRunCleanedAfterWindow: with retry.keep_failed of 1ms
// the worker removes the failed run's staged data once it is due and
// clears the record (waited for in the ledger); status then says a retry
// recomputes, and the retry does recompute the shards the sink lost, with
// the exact output.
func TestFailedClusterRunCleanedAfterWindow(t *testing.T) {
	led, spec, run, fs, heal := keptCase(t, time.Millisecond)
	ctx := context.Background()
	before := committedAttempts(t, led, run.ID, fs)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := led.PendingCleanup(ctx, run.ID)
		if errors.Is(err, ledger.ErrNotFound) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("the failed run's cleanup still pending after a minute (%v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := staged(t, spec); n != 0 {
		t.Fatalf("%d staged files left after the cleanup, want none", n)
	}
	v, err := RunView(ctx, led, "", mustRun(t, led, run.ID), nil, time.Now())
	if err != nil || !v.StagedRemoved || v.StagedKeptUntil != "" {
		t.Fatalf("view of the cleaned run: %+v, %v; want its staged data removed", v, err)
	}
	heal()
	if res := retryToSuccess(t, led, spec, run); !res.Removed {
		t.Errorf("retry result %+v: want Removed (%s)", res, res)
	}
	recomputed := 0
	for i, n := range committedAttempts(t, led, run.ID, fs) {
		if b, was := before[i]; was && n > b {
			recomputed++
		}
	}
	if recomputed != len(before) {
		t.Errorf("%d of the %d shards committed before the cleanup were recomputed, want all", recomputed, len(before))
	}
}

func mustRun(t *testing.T, led ledger.Ledger, id string) jobs.Run {
	t.Helper()
	r, err := led.Run(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCancelDropsKeptData: precog cancel of a failed cluster run whose
// staged data is kept removes that data now (the run stays failed, the
// record is cleared); a second cancel has nothing left to do.
func TestCancelDropsKeptData(t *testing.T) {
	led, spec, run, _, _ := keptCase(t, time.Hour)
	ctx := context.Background()
	res, err := Cancel(ctx, led, run.ID, CancelOptions{CleanAgain: true, Log: slog.New(slog.DiscardHandler)})
	// Dropped here (its one sink cleaned), or by the test's worker, which
	// may claim the cleanup the cancel made due before the cancel does.
	if err != nil || !res.Dropped || len(res.Cleaned) > 1 {
		t.Fatalf("cancel of the kept run = %+v, %v; want its staged data dropped from its one sink", res, err)
	}
	if n := staged(t, spec); n != 0 {
		t.Errorf("%d staged files left, want none", n)
	}
	if got := mustRun(t, led, run.ID); got.State != jobs.RunFailed {
		t.Errorf("run after the cancel is %s, want failed still", got.State)
	}
	if _, err := led.PendingCleanup(ctx, run.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("pending cleanup after the cancel: %v, want none", err)
	}
	if _, err := Cancel(ctx, led, run.ID, CancelOptions{CleanAgain: true}); !errors.Is(err, ErrNotCancellable) {
		t.Errorf("second cancel = %v, want ErrNotCancellable", err)
	}
}
