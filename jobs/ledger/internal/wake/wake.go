// Package wake fans "shards may be claimable" notices out to the Wake
// subscribers of a ledger, per pool, with a periodic poll as a fallback.
// Both ledgers use it: bolt signals in process, Postgres from LISTEN.
package wake

import (
	"context"
	"sync"
	"time"
)

// Hub holds the subscribers. The poll ticker starts with the first
// subscriber, so a ledger nobody waits on runs no goroutine.
type Hub struct {
	poll    func() time.Duration
	onStart func(ctx context.Context)
	mu      sync.Mutex
	subs    map[*sub]struct{}
	started bool
	closed  bool
	stop    context.CancelFunc
	done    sync.WaitGroup
	closing chan struct{}
}

type sub struct {
	pool string
	ch   chan struct{}
}

// New returns a hub polling every poll() (read when the first subscriber
// arrives). onStart, if set, runs in its own goroutine from then until
// Close (Postgres: the LISTEN loop).
func New(poll func() time.Duration, onStart func(ctx context.Context)) *Hub {
	return &Hub{poll: poll, onStart: onStart, subs: map[*sub]struct{}{}, closing: make(chan struct{})}
}

// Subscribe returns a channel (buffer 1, non-blocking sends) signalled for
// pool, closed when ctx ends or the hub closes.
func (h *Hub) Subscribe(ctx context.Context, pool string) <-chan struct{} {
	s := &sub{pool: pool, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return s.ch
	}
	h.subs[s] = struct{}{}
	if !h.started {
		h.started = true
		hctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		h.done.Add(1)
		go h.ticker(hctx, h.poll())
		if h.onStart != nil {
			h.done.Add(1)
			go func() { defer h.done.Done(); h.onStart(hctx) }()
		}
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-h.closing:
		}
		h.mu.Lock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			close(s.ch)
		}
		h.mu.Unlock()
	}()
	return s.ch
}

// Signal wakes the subscribers of pool ("" wakes all) without blocking.
func (h *Hub) Signal(pool string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if pool == "" || s.pool == pool {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (h *Hub) ticker(ctx context.Context, every time.Duration) {
	defer h.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.Signal("")
		}
	}
}

// Close ends every subscription and stops the hub's goroutines.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	stop := h.stop
	close(h.closing)
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	h.done.Wait()
}
