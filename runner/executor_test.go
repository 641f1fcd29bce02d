package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// keepOpen is a fault sink a worker's run cache may close: the test owns
// (and closes) the sink under it.
type keepOpen struct{ *faultSink }

func (keepOpen) Close() error { return nil }

// execCase names one way of running a job: `precog run` (RunLocal) or a
// worker of the cluster ledger (`precog run --db`, `precog worker`).
type execCase struct {
	name string
	// run executes spec with fs as its only sink and reports whether the
	// run succeeded (its error, or the failed run's).
	run func(t *testing.T, dir string, spec *jobs.Spec, fs *faultSink) (succeeded bool, msg string)
}

func localExec(t *testing.T, dir string, spec *jobs.Spec, fs *faultSink) (bool, string) {
	_, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Parallel: 1,
		Sinks: []sinks.Sink{fs}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

func workerExec(t *testing.T, _ string, spec *jobs.Spec, fs *faultSink) (bool, string) {
	led := clusterLedger(t)
	run := submit(t, led, spec)
	w := NewWorker(led, WorkerOptions{ID: "w0", StateDir: t.TempDir(), Lease: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	w.runs.openSinks = func(context.Context, *jobs.Spec) ([]sinks.Sink, error) { return []sinks.Sink{keepOpen{fs}}, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	got := waitRun(t, led, run.ID, 2*time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker: %v", err)
	}
	return got.State == jobs.RunSucceeded, got.Error
}

var execModes = []execCase{{"local", localExec}, {"worker", workerExec}}

// TestExecutorPolicyOnBothModes: one table of shard faults, one outcome
// for `precog run` and for a worker (the executor's one error policy).
// A transient error within retry.transient_window spends no attempt (the
// worker spent one per failure, and failed the run after max_attempts);
// a permanent one fails at once; another error spends an attempt and the
// last attempt fails the run.
func TestExecutorPolicyOnBothModes(t *testing.T) {
	cases := []struct {
		name      string
		failWrite func(shard, attempt int) bool
		writeErr  error
		succeeds  bool
		attempts0 int // attempts of shard 0
	}{
		{"transient within the window", func(s, a int) bool { return s == 0 && a <= 4 },
			fmt.Errorf("write: %w", syscall.ECONNRESET), true, 5},
		{"permanent", func(s, a int) bool { return s == 0 },
			&os.PathError{Op: "write", Path: "part-00000", Err: syscall.ENOSPC}, false, 1},
		{"unknown, retried", func(s, a int) bool { return s == 0 && a == 1 }, nil, true, 2},
		{"unknown, out of attempts", func(s, a int) bool { return s == 0 }, nil, false, 2},
	}
	for _, m := range execModes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				dir, spec := fixture(t, dataset)
				fs := &faultSink{Sink: parquetSink(t, spec), failWrite: c.failWrite, writeErr: c.writeErr}
				ok, msg := m.run(t, dir, spec, fs)
				fs.mu.Lock()
				attempts := fs.attempts[0]
				fs.mu.Unlock()
				if ok != c.succeeds || attempts != c.attempts0 {
					t.Fatalf("succeeded %v (%s), shard 0 attempted %d times; want succeeded %v, %d attempts", ok, msg, attempts, c.succeeds, c.attempts0)
				}
				if ok {
					if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
						t.Fatalf("published %d keys, want 3000", len(rows))
					}
				}
			})
		}
	}
}
