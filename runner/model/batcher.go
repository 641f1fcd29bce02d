package model

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBatcherClosed is returned by Batcher.Do once Close has begun.
var ErrBatcherClosed = errors.New("batcher closed")

// BatcherOption tunes a Batcher beyond its batch size and wait.
type BatcherOption func(*batcherConfig)

type batcherConfig struct {
	queue       int
	concurrency int
	noWatch     bool
	adaptive    bool
}

// WithAdaptiveWait makes maxWait a ceiling instead of a fixed window: the
// first request of a batch waits for others only while requests keep
// joining batches (the queue builds), the wait doubling towards maxWait
// batch after batch, and it halves with each batch that gathers nobody
// beyond its first request, down to zero (idle, where any wait is pure
// latency).
// Live inference wants large batches under load and no added latency when
// quiet; one fixed wait is right for only one of the two.
func WithAdaptiveWait() BatcherOption {
	return func(c *batcherConfig) { c.adaptive = true }
}

// adaptiveWait is WithAdaptiveWait's policy, apart from the batcher's
// timers so that it is tested with arrival counts, not with a clock.
type adaptiveWait struct {
	max time.Duration
	cur time.Duration
	// run is how long a batch's run takes (ns) without queueing: the
	// lower envelope of the runs' durations, set by the runs themselves,
	// hence atomic.
	run atomic.Int64
}

// wait is the window the next batch's first request waits for others:
// the grown wait, but never longer than a run takes. Waiting w to merge
// two runs into one saves at most one run's time, so a wait longer than
// a run adds more latency than it saves: a model that runs in 50 µs must
// not hold its batches for the 500 µs ceiling that suits one of 1 ms.
func (a *adaptiveWait) wait() time.Duration {
	if r := time.Duration(a.run.Load()); r > 0 && r < a.cur {
		return r
	}
	return a.cur
}

// observeRun folds one run's duration into the run time: the lower
// envelope, which rises by a sixteenth per run while runs take longer. A
// run may include waiting for a session held by another batch (a batcher
// runs more batches than the model has sessions, so that one encodes
// while another infers); the envelope keeps the runs that did not wait.
// Concurrent runs may lose an update to each other: harmless.
func (a *adaptiveWait) observeRun(d time.Duration) {
	old := a.run.Load()
	if old == 0 {
		a.run.Store(int64(d))
		return
	}
	a.run.Store(min(int64(d), old+old/16))
}

// observe takes the size of the batch just formed: requests beyond the
// first mean the queue builds (grow the wait, from a sixteenth of the
// ceiling, doubling); a batch of one means nobody came in the window
// (halve it, and below a sixteenth of the ceiling drop it to zero). Halving
// rather than zeroing keeps a steady stream whose gaps are longer than the
// smallest window from resetting the wait on every unlucky batch; an idle
// stream reaches zero within five lone requests.
func (a *adaptiveWait) observe(size int) {
	if size <= 1 {
		if a.cur /= 2; a.cur < a.max/16 {
			a.cur = 0
		}
		return
	}
	a.cur = min(a.max, max(2*a.cur, a.max/16))
}

// WithoutCallerWatch runs every batch to completion with a context that is
// never cancelled, instead of cancelling it once all of its callers have
// left. For short runs (a Redis MGET) watching each caller's context costs
// more than the run it could save; callers still return as soon as their
// own context ends.
func WithoutCallerWatch() BatcherOption {
	return func(c *batcherConfig) { c.noWatch = true }
}

// WithQueue bounds the requests waiting to join a batch (default 4×maxBatch).
// Do blocks (honouring its context) while the queue is full, so memory stays
// bounded whatever the request rate; callers shed load in front of it.
func WithQueue(n int) BatcherOption {
	return func(c *batcherConfig) {
		if n > 0 {
			c.queue = n
		}
	}
}

// WithConcurrency sets how many batches may run at once (default 1). Match it
// to the model's session pool so every session stays busy; while all runners
// are busy the next batch keeps growing up to maxBatch.
func WithConcurrency(n int) BatcherOption {
	return func(c *batcherConfig) {
		if n > 0 {
			c.concurrency = n
		}
	}
}

// Batcher merges concurrent single-item requests into batched calls of run:
// the first request of a batch waits at most maxWait for others to join, and a
// batch never exceeds maxBatch items. It exists so that live inference on
// many keys costs one session run instead of one per request.
//
// An error from run (or a panic in it, recovered) fails every request of
// that batch; a run returning the wrong number of outputs does the same.
// Batcher is safe for concurrent use.
type Batcher[In, Out any] struct {
	maxBatch int
	maxWait  time.Duration
	adaptive *adaptiveWait // nil: a fixed maxWait; only the loop uses it
	noWatch  bool
	run      func(context.Context, []In) ([]Out, error)

	queue   chan *batchCall[In, Out]
	closing chan struct{} // closed when Close begins: Do stops enqueuing
	done    chan struct{} // closed when the loop and every run have ended
	sem     chan struct{} // one token per running batch

	mu        sync.RWMutex // guards closed against in-flight enqueues
	closed    bool
	closeOnce sync.Once
	runs      sync.WaitGroup
}

type batchCall[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{}
}

// NewBatcher starts a batcher; Close stops it. maxBatch < 1 is treated as 1
// and a negative maxWait as 0 (run whatever is queued without waiting).
func NewBatcher[In, Out any](maxBatch int, maxWait time.Duration, run func(ctx context.Context, in []In) ([]Out, error), opts ...BatcherOption) *Batcher[In, Out] {
	if maxBatch < 1 {
		maxBatch = 1
	}
	if maxWait < 0 {
		maxWait = 0
	}
	cfg := batcherConfig{queue: 4 * maxBatch, concurrency: 1}
	for _, o := range opts {
		o(&cfg)
	}
	b := &Batcher[In, Out]{
		maxBatch: maxBatch,
		maxWait:  maxWait,
		noWatch:  cfg.noWatch,
		run:      run,
		queue:    make(chan *batchCall[In, Out], cfg.queue),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		sem:      make(chan struct{}, cfg.concurrency),
	}
	if cfg.adaptive {
		b.adaptive = &adaptiveWait{max: maxWait}
	}
	go b.loop()
	return b
}

// Do submits one item and waits for its result. It returns ctx.Err() when ctx
// ends first (the item is then dropped from its batch if the batch has not
// started yet) and ErrBatcherClosed after Close.
func (b *Batcher[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	var zero Out
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &batchCall[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return zero, ErrBatcherClosed
	}
	select {
	case b.queue <- c:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return zero, ctx.Err()
	case <-b.closing:
		b.mu.RUnlock()
		return zero, ErrBatcherClosed
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Close stops accepting requests, runs every request already queued, waits
// for running batches to finish, and returns. It is idempotent.
func (b *Batcher[In, Out]) Close() error {
	b.closeOnce.Do(func() {
		close(b.closing)
		b.mu.Lock() // waits for Do calls that are mid-enqueue to leave
		b.closed = true
		close(b.queue)
		b.mu.Unlock()
	})
	<-b.done
	return nil
}

func (b *Batcher[In, Out]) loop() {
	defer func() {
		b.runs.Wait()
		close(b.done)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		first, ok := <-b.queue
		if !ok {
			return
		}
		batch := make([]*batchCall[In, Out], 0, b.maxBatch)
		batch = appendLive(batch, first)
		open := true
		wait := b.maxWait
		if b.adaptive != nil {
			wait = b.adaptive.wait()
		}
		// Phase 1: gather for at most wait, or until full.
		if wait > 0 {
			timer.Reset(wait)
		gather:
			for len(batch) < b.maxBatch {
				select {
				case c, more := <-b.queue:
					if !more {
						open = false
						break gather
					}
					batch = appendLive(batch, c)
				case <-timer.C:
					break gather
				}
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		} else {
		drain:
			for len(batch) < b.maxBatch {
				select {
				case c, more := <-b.queue:
					if !more {
						open = false
						break drain
					}
					batch = appendLive(batch, c)
				default:
					break drain
				}
			}
		}
		// Phase 2: while every runner is busy, keep growing the batch.
		acquired := false
		for !acquired {
			if len(batch) >= b.maxBatch || !open {
				b.sem <- struct{}{}
				acquired = true
				break
			}
			select {
			case b.sem <- struct{}{}:
				acquired = true
			case c, more := <-b.queue:
				if !more {
					open = false
					continue
				}
				batch = appendLive(batch, c)
			}
		}
		if b.adaptive != nil {
			b.adaptive.observe(len(batch))
		}
		if len(batch) == 0 {
			<-b.sem
		} else {
			b.runs.Add(1)
			go b.execute(batch)
		}
		if !open {
			return
		}
	}
}

// appendLive adds c unless its caller already gave up.
func appendLive[In, Out any](batch []*batchCall[In, Out], c *batchCall[In, Out]) []*batchCall[In, Out] {
	if c.ctx.Err() != nil {
		c.err = c.ctx.Err()
		close(c.done)
		return batch
	}
	return append(batch, c)
}

func (b *Batcher[In, Out]) execute(batch []*batchCall[In, Out]) {
	defer func() {
		<-b.sem
		b.runs.Done()
	}()
	ins := make([]In, len(batch))
	for i, c := range batch {
		ins[i] = c.in
	}
	ctx := context.Background()
	if !b.noWatch {
		// The batch runs while at least one caller still waits for it.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := watchCallers(cancel, batch)
		defer stop()
	}

	t0 := time.Now()
	outs, err := b.safeRun(ctx, ins)
	if b.adaptive != nil {
		b.adaptive.observeRun(time.Since(t0))
	}
	if err == nil && len(outs) != len(ins) {
		err = fmt.Errorf("batcher: run returned %d results for %d inputs", len(outs), len(ins))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.out = outs[i]
		}
		close(c.done)
	}
}

func (b *Batcher[In, Out]) safeRun(ctx context.Context, ins []In) (outs []Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, fmt.Errorf("batcher: run panicked on a batch of %d: %v", len(ins), r)
		}
	}()
	return b.run(ctx, ins)
}

// watchCallers cancels the batch context once every caller's context has
// ended, so that abandoned work stops early. It returns a function that stops
// the watcher; context.AfterFunc needs no goroutine while waiting.
func watchCallers[In, Out any](cancel context.CancelFunc, batch []*batchCall[In, Out]) func() {
	var gone atomic.Int64
	n := int64(len(batch))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if gone.Add(1) == n {
				cancel()
			}
		})
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
