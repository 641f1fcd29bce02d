package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// hub fans notices out to Wake subscribers: a poll ticker always, and one
// LISTEN connection (unless PollOnly) that reconnects with backoff. Both
// start with the first subscriber.
type hub struct {
	l       *Ledger
	mu      sync.Mutex
	subs    map[*sub]struct{}
	started bool
	closed  bool
	stop    context.CancelFunc
	done    sync.WaitGroup
	// closing is closed by close, ending every subscription.
	closing chan struct{}
}

type sub struct {
	pool string
	ch   chan struct{}
}

func newHub(l *Ledger) *hub {
	return &hub{l: l, subs: map[*sub]struct{}{}, closing: make(chan struct{})}
}

// Wake implements ledger.Cluster.
func (l *Ledger) Wake(ctx context.Context, pool string) <-chan struct{} {
	return l.hub.subscribe(ctx, pool)
}

func (h *hub) subscribe(ctx context.Context, pool string) <-chan struct{} {
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
		go h.poll(hctx)
		if !h.l.opts.PollOnly {
			h.done.Add(1)
			go h.listen(hctx)
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

// signal wakes subscribers of pool ("" wakes all) without blocking.
func (h *hub) signal(pool string) {
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

func (h *hub) poll(ctx context.Context) {
	defer h.done.Done()
	t := time.NewTicker(h.l.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.signal("")
		}
	}
}

// listen holds a dedicated LISTEN connection, reconnecting with backoff
// (100ms doubling to 10s); after each (re)connect everyone is woken, since
// notices may have been missed meanwhile.
func (h *hub) listen(ctx context.Context) {
	defer h.done.Done()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := h.listenOnce(ctx, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		h.l.opts.Logger.Warn("ledger: LISTEN connection lost; reconnecting", "channel", NotifyChannel, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (h *hub) listenOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, h.l.connCfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	connected()
	h.signal("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.signal(n.Payload)
	}
}

func (h *hub) close() {
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
