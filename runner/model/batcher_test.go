package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func batcherDouble(_ context.Context, in []int) ([]int, error) {
	out := make([]int, len(in))
	for i, v := range in {
		out[i] = 2 * v
	}
	return out, nil
}

func TestBatcherMergesConcurrentRequests(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	run := func(ctx context.Context, in []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(in))
		mu.Unlock()
		return batcherDouble(ctx, in)
	}
	b := NewBatcher(16, 20*time.Millisecond, run)
	defer b.Close()

	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := b.Do(context.Background(), i)
			if err != nil {
				errs <- err
				return
			}
			if got != 2*i {
				errs <- fmt.Errorf("Do(%d) = %d, want %d", i, got, 2*i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, s := range sizes {
		if s > 16 {
			t.Errorf("batch of %d exceeds maxBatch 16", s)
		}
		total += s
	}
	if total != n {
		t.Errorf("runs covered %d items, want %d", total, n)
	}
	// 64 concurrent requests with a 20ms window must not run one by one.
	if len(sizes) > n/2 {
		t.Errorf("%d runs for %d concurrent requests: not batching (sizes %v)", len(sizes), n, sizes)
	}
}

func TestBatcherSingleRequestWaitsAtMostMaxWait(t *testing.T) {
	b := NewBatcher(100, 5*time.Millisecond, batcherDouble)
	defer b.Close()
	start := time.Now()
	got, err := b.Do(context.Background(), 21)
	if err != nil || got != 42 {
		t.Fatalf("Do = %d, %v; want 42, nil", got, err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("a lone request took %v with maxWait 5ms", d)
	}
}

func TestBatcherZeroWaitRunsImmediately(t *testing.T) {
	b := NewBatcher(8, 0, batcherDouble)
	defer b.Close()
	for i := range 100 {
		got, err := b.Do(context.Background(), i)
		if err != nil || got != 2*i {
			t.Fatalf("Do(%d) = %d, %v", i, got, err)
		}
	}
}

func TestBatcherErrorFailsWholeBatch(t *testing.T) {
	boom := errors.New("boom")
	gate := make(chan struct{})
	var calls atomic.Int32
	run := func(_ context.Context, in []int) ([]int, error) {
		calls.Add(1)
		<-gate
		return nil, boom
	}
	b := NewBatcher(4, time.Second, run)
	defer b.Close()
	var wg sync.WaitGroup
	results := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Do(context.Background(), i)
			results <- err
		}()
	}
	close(gate)
	wg.Wait()
	close(results)
	for err := range results {
		if !errors.Is(err, boom) {
			t.Errorf("Do error = %v, want boom", err)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("run called %d times for one full batch, want 1", c)
	}
}

func TestBatcherPanicAndWrongLengthBecomeErrors(t *testing.T) {
	b := NewBatcher(1, 0, func(_ context.Context, in []int) ([]int, error) {
		if in[0] == 0 {
			panic("model exploded")
		}
		return []int{1, 2}, nil
	})
	defer b.Close()
	if _, err := b.Do(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("panic: err = %v, want a 'panicked' error", err)
	}
	if _, err := b.Do(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "2 results for 1 inputs") {
		t.Errorf("wrong length: err = %v", err)
	}
	// The batcher still works after both.
	b2 := NewBatcher(2, 0, batcherDouble)
	defer b2.Close()
	if v, err := b2.Do(context.Background(), 3); err != nil || v != 6 {
		t.Errorf("Do = %d, %v", v, err)
	}
}

func TestBatcherCancelledCallerReturnsAndIsDropped(t *testing.T) {
	release := make(chan struct{})
	var seen sync.Map
	run := func(_ context.Context, in []int) ([]int, error) {
		for _, v := range in {
			seen.Store(v, true)
		}
		<-release
		return make([]int, len(in)), nil
	}
	b := NewBatcher(1, 0, run)
	defer b.Close()
	// Occupy the single runner.
	go func() { _, _ = b.Do(context.Background(), 1) }()
	batcherWaitFor(t, func() bool { _, ok := seen.Load(1); return ok })

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 2); errc <- err }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Do = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cancelled Do did not return")
	}
	close(release)
	// Item 2 either never reached run or was already in a forming batch;
	// the next request must still be served.
	if _, err := b.Do(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
}

func TestBatcherRunContextCancelledWhenAllCallersLeave(t *testing.T) {
	stopped := make(chan error, 1)
	run := func(ctx context.Context, in []int) ([]int, error) {
		<-ctx.Done()
		stopped <- ctx.Err()
		return nil, ctx.Err()
	}
	b := NewBatcher(2, 0, run)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Do(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want deadline exceeded", err)
	}
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("run context not cancelled after its only caller left")
	}
}

func TestBatcherBoundedQueueBlocksUntilContextEnds(t *testing.T) {
	release := make(chan struct{})
	run := func(_ context.Context, in []int) ([]int, error) {
		<-release
		return make([]int, len(in)), nil
	}
	b := NewBatcher(1, 0, run, WithQueue(1), WithConcurrency(1))
	defer func() { close(release); b.Close() }()
	// 1 running + 1 in the loop's hand (growing) + 1 queued fill it.
	for i := range 3 {
		go func() { _, _ = b.Do(context.Background(), i) }()
	}
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Do(ctx, 99); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do on a full queue = %v, want deadline exceeded", err)
	}
}

func TestBatcherConcurrencyRunsBatchesInParallel(t *testing.T) {
	var running, peak atomic.Int32
	run := func(_ context.Context, in []int) ([]int, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		return make([]int, len(in)), nil
	}
	b := NewBatcher(1, 0, run, WithConcurrency(4))
	defer b.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = b.Do(context.Background(), i) }()
	}
	wg.Wait()
	if p := peak.Load(); p < 2 || p > 4 {
		t.Fatalf("peak concurrent runs = %d, want 2..4", p)
	}
}

func TestBatcherCloseDrainsQueuedAndRejectsNew(t *testing.T) {
	release := make(chan struct{})
	run := func(_ context.Context, in []int) ([]int, error) {
		<-release
		return batcherDouble(context.Background(), in)
	}
	b := NewBatcher(2, 0, run, WithQueue(16))
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := b.Do(context.Background(), i); err == nil && v == 2*i {
				ok.Add(1)
			}
		}()
	}
	time.Sleep(30 * time.Millisecond)
	closed := make(chan struct{})
	go func() { _ = b.Close(); close(closed) }()
	time.Sleep(10 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was still running")
	default:
	}
	close(release)
	<-closed
	wg.Wait()
	if ok.Load() != 6 {
		t.Errorf("%d of 6 queued requests completed across Close", ok.Load())
	}
	if _, err := b.Do(context.Background(), 1); !errors.Is(err, ErrBatcherClosed) {
		t.Errorf("Do after Close = %v, want ErrBatcherClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestBatcherConcurrentDoAndClose(t *testing.T) {
	for range 20 {
		b := NewBatcher(8, 50*time.Microsecond, batcherDouble)
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := b.Do(context.Background(), i)
				if err == nil && v != 2*i {
					t.Errorf("Do(%d) = %d", i, v)
				}
				if err != nil && !errors.Is(err, ErrBatcherClosed) {
					t.Errorf("Do(%d) err = %v", i, err)
				}
			}()
		}
		_ = b.Close()
		wg.Wait()
	}
}

func BenchmarkBatcherDo(b *testing.B) {
	bt := NewBatcher(64, 100*time.Microsecond, batcherDouble, WithConcurrency(2))
	defer bt.Close()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := bt.Do(context.Background(), i); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func batcherWaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// While a batch runs, arrivals accumulate for the next one however long the
// run takes: no fixed wait caps the next batch (maxWait 0 here), only
// maxBatch does. Live inference relies on this to form large batches under
// load.
func TestBatcherAccumulatesWhileRunnerBusy(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	run := func(_ context.Context, in []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(in))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return make([]int, len(in)), nil
	}
	b := NewBatcher(64, 0, run)
	defer b.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = b.Do(context.Background(), 0) }()
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the first batch to start", func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) == 1 })
	const n = 40
	var entered atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entered.Add(1)
			_, _ = b.Do(context.Background(), i+1)
		}()
	}
	// Every caller is in Do and the queue is drained into the growing batch.
	waitFor("the callers to enqueue", func() bool { return entered.Load() == n && len(b.queue) == 0 })
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[1] != n {
		t.Fatalf("batch sizes %v, want [1 %d]: arrivals during a run must form one next batch", sizes, n)
	}
}

// WithoutCallerWatch: a caller that leaves returns at once, and the batch
// still runs to completion with a context that is never cancelled.
func TestBatcherWithoutCallerWatchRunsToCompletion(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan error, 1)
	run := func(ctx context.Context, in []int) ([]int, error) {
		<-release
		finished <- ctx.Err()
		return make([]int, len(in)), nil
	}
	b := NewBatcher(2, 0, run, WithoutCallerWatch())
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Do(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want deadline exceeded", err)
	}
	close(release)
	select {
	case err := <-finished:
		if err != nil {
			t.Fatalf("run context ended (%v) although the batch was to run to completion", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("batch never finished")
	}
}

// The adaptive policy under controlled arrival patterns: batches that
// gather others grow the wait (doubling, capped), batches of one halve it
// down to zero.
func TestAdaptiveWaitGrowsWhileQueueBuildsAndDropsWhenIdle(t *testing.T) {
	a := adaptiveWait{max: 1600 * time.Microsecond}
	if a.wait() != 0 {
		t.Fatalf("initial wait %v, want 0 (no latency before any load)", a.wait())
	}
	a.observe(1)
	if a.wait() != 0 {
		t.Fatalf("after lone requests: %v, want 0", a.wait())
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 1600}
	for i, w := range want {
		a.observe(3 + i)
		if a.wait() != w*time.Microsecond {
			t.Fatalf("after %d building batches: wait %v, want %v", i+1, a.wait(), w*time.Microsecond)
		}
	}
	for i, w := range []time.Duration{800, 400, 200, 100, 0, 0} {
		a.observe(1)
		if a.wait() != w*time.Microsecond {
			t.Fatalf("after %d batches of one: wait %v, want %v", i+1, a.wait(), w*time.Microsecond)
		}
	}
	a.observe(5)
	a.observe(0) // every caller of the batch had left
	if a.wait() != 0 {
		t.Fatalf("after an empty batch: wait %v, want 0", a.wait())
	}
}

// In the batcher: one request at a time never waits (its ceiling is an
// hour, so a wait would show as a test timeout); a queue that builds while
// the runner is busy grows the wait; lone requests after that drop it.
func TestBatcherAdaptiveWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idle := NewBatcher(64, time.Hour, batcherDouble, WithAdaptiveWait())
	defer idle.Close()
	for i := range 20 {
		if got, err := idle.Do(ctx, i); err != nil || got != 2*i {
			t.Fatalf("sequential Do(%d) = %d, %v: a lone request waited", i, got, err)
		}
	}
	// The loop observes a batch before it runs it, and the run ends before
	// Do returns: reading the wait here is ordered after that.
	if w := idle.adaptive.cur; w != 0 {
		t.Fatalf("wait after sequential requests: %v, want 0", w)
	}

	gate := make(chan struct{})
	var running atomic.Int32
	run := func(ctx context.Context, in []int) ([]int, error) {
		running.Add(1)
		if in[0] < 0 {
			<-gate
		}
		return batcherDouble(ctx, in)
	}
	b := NewBatcher(4, 50*time.Millisecond, run, WithAdaptiveWait())
	defer b.Close()
	// A batch blocks the only runner; 10 requests arrive behind it: the
	// loop gathers 4 into the next batch and 6 stay queued.
	first := make(chan error, 1)
	go func() { _, err := b.Do(ctx, -1); first <- err }()
	waitFor(t, "the blocking batch runs", func() bool { return running.Load() == 1 })
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := b.Do(ctx, 100+i); err != nil || got != 200+2*i {
				t.Errorf("queued Do(%d) = %d, %v", 100+i, got, err)
			}
		}()
	}
	waitFor(t, "a full batch gathered and 6 queued", func() bool { return len(b.queue) == 6 })
	close(gate)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if w := b.adaptive.cur; w <= 0 || w > 50*time.Millisecond {
		t.Fatalf("wait after a queue built: %v, want in (0, 50ms]", w)
	}
	for i := range 5 {
		if got, err := b.Do(ctx, i); err != nil || got != 2*i {
			t.Fatalf("lone Do(%d) = %d, %v", i, got, err)
		}
	}
	if w := b.adaptive.cur; w != 0 {
		t.Fatalf("wait after 5 lone requests: %v, want 0", w)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The adaptive wait never exceeds a run's (average) duration: for a model
// that runs in far less than the ceiling, waiting the ceiling would cost
// more latency than the runs it saves.
func TestAdaptiveWaitCappedByRunTime(t *testing.T) {
	a := adaptiveWait{max: 1600 * time.Microsecond}
	for range 6 {
		a.observe(10)
	}
	if a.wait() != 1600*time.Microsecond {
		t.Fatalf("grown wait with no run measured: %v, want the ceiling", a.wait())
	}
	a.observeRun(100 * time.Microsecond)
	if a.wait() != 100*time.Microsecond {
		t.Fatalf("wait after a 100µs run: %v, want 100µs", a.wait())
	}
	a.observeRun(100 * time.Millisecond) // a run that queued for a session
	if a.wait() > 110*time.Microsecond {
		t.Fatalf("wait after one queued run: %v, want the unqueued run's ~100µs", a.wait())
	}
	for range 100 {
		a.observeRun(10 * time.Millisecond) // a slower model: the ceiling rules again
	}
	if a.wait() != 1600*time.Microsecond {
		t.Fatalf("wait with 10ms runs: %v, want the 1.6ms ceiling", a.wait())
	}
	for range 6 {
		a.observe(1)
	}
	if a.wait() != 0 {
		t.Fatalf("idle: wait %v, want 0 whatever the runs take", a.wait())
	}
}
