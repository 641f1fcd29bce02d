package runner

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/sinks"
)

// TestWorkerShardsInFlightPerDevice: a worker with --devices cpu and no
// --parallel works on two shards at once (DefaultParallel), each claim
// loop under its own holder name; --parallel 3 gives three. Each shard's
// commit waits, on a barrier in a fault sink around the real Parquet sink,
// until as many shards as the worker should hold have reached their
// commit: with fewer loops the barrier never fills and the test fails at
// its bound; the run then succeeds with every row.
func TestWorkerShardsInFlightPerDevice(t *testing.T) {
	for _, c := range []struct {
		parallel, want int
	}{{0, 2}, {3, 3}} {
		t.Run(fmt.Sprintf("parallel %d", c.parallel), func(t *testing.T) {
			led := clusterLedger(t)
			_, spec := fixture(t, dataset) // 6 shards of 500 rows
			run := submit(t, led, spec)
			var (
				mu      sync.Mutex
				holders = map[string]bool{}
			)
			barrier, full := commitBarrier(c.want)
			w := NewWorker(led, WorkerOptions{ID: "w0", Parallel: c.parallel, StateDir: t.TempDir(), Lease: time.Hour,
				Logger: slog.New(slog.DiscardHandler), OnShard: func(e ShardEvent) {
					mu.Lock()
					holders[e.Worker] = true
					mu.Unlock()
				}})
			w.runs.openSinks = func(_ context.Context, spec *jobs.Spec) ([]sinks.Sink, error) {
				return []sinks.Sink{&faultSink{Sink: parquetSink(t, spec), onCommit: barrier}}, nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			select {
			case <-full:
			case <-time.After(2 * time.Minute):
				t.Fatalf("after 2 minutes fewer than the %d shards the worker should hold at once reached their commit", c.want)
			}
			got := waitRun(t, led, run.ID, 2*time.Minute)
			if got.State != jobs.RunSucceeded || got.Counts.RowsOut != 3000 {
				t.Fatalf("run = %s %+v (%s), want succeeded with 3000 rows", got.State, got.Counts, got.Error)
			}
			mu.Lock()
			names := slices.Sorted(maps.Keys(holders))
			mu.Unlock()
			want := []string{"w0/cpu", "w0/cpu#2", "w0/cpu#3"}[:c.want]
			if !slices.Equal(names, want) {
				t.Errorf("shards held by %v, want %v", names, want)
			}
		})
	}
}

// TestLocalRunLoopsHoldUnderOwnNames: precog run's claim loops hold their
// leases under their own names (host-pid/cpu, host-pid/cpu#2), as a
// worker's do, so each shard records which loop committed it and the
// dashboard's timeline has one lane per loop. A barrier in the commit
// makes both loops hold a shard at once.
func TestLocalRunLoopsHoldUnderOwnNames(t *testing.T) {
	dir, spec := fixture(t, dataset)
	barrier, _ := commitBarrier(2)
	fs := &faultSink{Sink: parquetSink(t, spec), onCommit: barrier}
	state := filepath.Join(dir, "state")
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: state, Parallel: 2, Sinks: []sinks.Sink{fs}})
	if err != nil {
		t.Fatal(err)
	}
	led, err := bolt.OpenIn(state)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	shards, err := led.Shards(context.Background(), res.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range shards {
		names[s.Worker] = true
	}
	me := ledger.ProcessName()
	if want := []string{me + "/cpu", me + "/cpu#2"}; !slices.Equal(slices.Sorted(maps.Keys(names)), want) {
		t.Errorf("shards committed by %v, want %v", slices.Sorted(maps.Keys(names)), want)
	}
}

// commitBarrier is a faultSink's onCommit that holds every commit until n
// of them wait at once (or 2 minutes pass: with fewer shards in flight it
// never fills, and the test fails on what it then sees); full closes then.
func commitBarrier(n int) (onCommit func(int), full <-chan struct{}) {
	var mu sync.Mutex
	waiting := 0
	ch := make(chan struct{})
	return func(int) {
		mu.Lock()
		if waiting++; waiting == n {
			close(ch)
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(2 * time.Minute):
		}
	}, ch
}

// TestDefaultParallel: 2 shards in flight on a CPU; on a GPU half the
// cores Go may use, shared among the process's GPUs, between 4 and 16.
func TestDefaultParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		device      string
		procs, gpus int
		want        int
	}{
		{"cpu", 16, 0, 2}, {"cpu", 2, 1, 2},
		{"cuda:0", 2, 1, 4}, {"cuda:0", 16, 1, 8}, {"cuda:1", 16, 2, 4}, {"cuda:0", 64, 1, 16}, {"cuda:0", 128, 0, 16},
	} {
		runtime.GOMAXPROCS(c.procs)
		if got := DefaultParallel(c.device, c.gpus); got != c.want {
			t.Errorf("DefaultParallel(%s, %d GPUs) on %d cores = %d, want %d", c.device, c.gpus, c.procs, got, c.want)
		}
	}
}
