package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
)

// submit plans spec and creates its run in led, as `precog submit` does.
func submit(t *testing.T, led ledger.Ledger, spec *jobs.Spec) jobs.Run {
	t.Helper()
	ctx := context.Background()
	job, err := OpenJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	run, shards, err := PlanRun(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.CreateRun(ctx, run, shards); err != nil {
		t.Fatal(err)
	}
	return run
}

func clusterLedger(t *testing.T) *pgledger.Ledger {
	t.Helper()
	pg := testservers.Postgres(t)
	led, err := pgledger.Open(context.Background(), pg.DSN, pgledger.Options{PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	return led
}

func waitRun(t *testing.T, led ledger.Ledger, id string, within time.Duration) jobs.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := led.Run(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State.Terminal() {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %s", id, r.State, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startWorkers runs n workers over led until the returned stop is called.
func startWorkers(t *testing.T, led ledger.Store, n int, opts WorkerOptions) (events func() []ShardEvent, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var evs []ShardEvent
	for i := range n {
		o := opts
		o.ID = fmt.Sprintf("w%d", i)
		o.StateDir = t.TempDir()
		o.Logger = slog.New(slog.DiscardHandler)
		o.OnShard = func(e ShardEvent) { mu.Lock(); evs = append(evs, e); mu.Unlock() }
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := NewWorker(led, o).Run(ctx); err != nil {
				t.Errorf("worker %s: %v", o.ID, err)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return func() []ShardEvent { mu.Lock(); defer mu.Unlock(); return append([]ShardEvent(nil), evs...) }, stop
}

// TestWorkersShareARun: three workers execute one submitted run; exactly
// one publishes it, and the output equals every input row once.
func TestWorkersShareARun(t *testing.T) {
	led := clusterLedger(t)
	_, spec := fixture(t, dataset)
	run := submit(t, led, spec)
	events, stop := startWorkers(t, led, 3, WorkerOptions{Lease: 3 * time.Second})
	got := waitRun(t, led, run.ID, time.Minute)
	stop()
	if got.State != jobs.RunSucceeded || got.Counts.RowsOut != 3000 {
		t.Fatalf("run = %s %+v (%s), want succeeded with 3000 rows", got.State, got.Counts, got.Error)
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys, want 3000", len(rows))
	}
	workers := map[string]bool{}
	for _, e := range events() {
		if e.Outcome == "committed" {
			workers[e.Worker] = true
		}
	}
	if len(workers) < 2 {
		t.Errorf("shards committed by %v: the run was not shared", workers)
	}
}

// TestWorkerRefusesOtherModel: a worker whose model file differs from the
// submitted one gives the run's shards back without spending an attempt
// and reports the run as one it cannot execute, naming both versions; the
// run waits for a worker that can run it instead of failing.
func TestWorkerRefusesOtherModel(t *testing.T) {
	led := clusterLedger(t)
	dir, spec := fixture(t, dataset)
	run := submit(t, led, spec)
	// The model file changes after submit (another version deployed here).
	// A trailing empty field keeps the protobuf valid and changes the hash.
	if err := os.WriteFile(filepath.Join(dir, "models", "ranker.onnx"), append(mustRead(t, spec.Model.Path), 0x7a, 0x00), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stop := startWorkers(t, led, 1, WorkerOptions{Lease: 3 * time.Second})
	defer stop()
	var wl ledger.Workers = led
	var reason string
	for deadline := time.Now().Add(time.Minute); reason == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not report run %s as one it cannot execute within a minute", run.ID)
		}
		ws, err := wl.ListWorkers(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			for _, u := range w.Unable {
				if u.Run == run.ID && w.ID == "w0" {
					reason = u.Reason
				}
			}
		}
	}
	if !containsAll(reason, "version", run.ModelVersion) {
		t.Errorf("reason %q does not name the submitted model version", reason)
	}
	if got, err := led.Run(context.Background(), run.ID); err != nil || got.State.Terminal() {
		t.Fatalf("run = %s (%v), want it waiting", got.State, err)
	}
	shards, _ := led.Shards(context.Background(), run.ID)
	for _, s := range shards {
		if s.Error != "" || s.State == jobs.ShardFailed || s.Attempts > 1 {
			t.Fatalf("shard %d = %s attempts %d error %q, want no attempt spent", s.Index, s.State, s.Attempts, s.Error)
		}
	}
}

// TestCancelStopsWorkers: a cancelled run's shards stop within seconds and
// nothing is published.
func TestCancelStopsWorkers(t *testing.T) {
	led := clusterLedger(t)
	big := dataset
	big.RowsPerFile = 20000
	_, spec := fixture(t, big)
	run := submit(t, led, spec)
	events, stop := startWorkers(t, led, 2, WorkerOptions{Lease: 3 * time.Second})
	for len(events()) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if err := led.SetRunState(context.Background(), run.ID, jobs.RunCancelled, "test"); err != nil {
		t.Fatal(err)
	}
	cancelled := time.Now()
	time.Sleep(3 * time.Second)
	n := len(events())
	time.Sleep(2 * time.Second)
	if after := len(events()); after != n {
		t.Fatalf("workers went on with %d shard attempts more than 3 s after the cancel", after-n)
	}
	stop()
	if _, err := os.Stat(spec.Sinks.Parquet.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a cancelled run published (%v)", err)
	}
	t.Logf("workers quiet within 3 s of the cancel at %s", cancelled.Format(time.TimeOnly))
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
