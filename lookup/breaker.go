package lookup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Circuit breaker tuning. A store that failed breakerThreshold steps in a
// row is skipped: requests fall through to the next store at once instead
// of each waiting out a dial or the step timeout. A background probe tries
// the store again after breakerMinDelay, doubling up to breakerMaxDelay
// (±20% jitter, so that replicas do not probe in step), and closes the
// breaker on the first success.
const (
	breakerThreshold = 3
	breakerMinDelay  = 250 * time.Millisecond
	breakerMaxDelay  = 10 * time.Second
	breakerJitter    = 0.2
)

// errCircuitOpen is the failure of a store step skipped by an open breaker.
// It is immutable once made: requests carry it in their errors.
type errCircuitOpen struct {
	store, target string
	since         time.Time
	last          error
}

func (e *errCircuitOpen) Error() string {
	return fmt.Sprintf("%s %s: circuit open since %s (skipped until a background probe succeeds): %v",
		e.store, e.target, e.since.UTC().Format(time.RFC3339), e.last)
}

func (e *errCircuitOpen) Unwrap() error { return e.last }

// newBreaker makes the breaker of one store connection (store "redis" or
// "postgres", target its address), probed with probe.
func (s *Server) newBreaker(store, target string, probe func(context.Context) error) *breaker {
	return &breaker{store: store, target: target, probe: probe, probeTimeout: max(s.cfg.StoreTimeout, time.Second),
		gauge: s.metrics.circuitOpen.WithLabelValues(store, target), log: s.cfg.Logger, ctx: s.ctx, wg: &s.bg}
}

// breaker is one store connection's circuit breaker (a Redis server, a
// Postgres DSN), shared by every namespace that uses it. The request path
// costs one atomic load while closed.
type breaker struct {
	store, target string
	probe         func(ctx context.Context) error
	probeTimeout  time.Duration
	gauge         prometheus.Gauge
	log           *slog.Logger
	ctx           context.Context
	wg            *sync.WaitGroup

	open     atomic.Bool
	failures atomic.Int32

	mu     sync.Mutex
	opened *errCircuitOpen // the open state's error; nil while closed
}

// allow returns nil when the store may be tried, else the open state's
// error (an *errCircuitOpen).
func (b *breaker) allow() error {
	if b == nil || !b.open.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opened == nil {
		return nil
	}
	return b.opened
}

// success resets the run of failures.
func (b *breaker) success() {
	if b != nil && b.failures.Load() != 0 {
		b.failures.Store(0)
	}
}

// failure counts a failed step; the breakerThreshold-th in a row opens the
// breaker and starts the probe.
func (b *breaker) failure(err error) {
	if b == nil || b.failures.Add(1) < breakerThreshold || !b.open.CompareAndSwap(false, true) {
		return
	}
	b.mu.Lock()
	b.opened = &errCircuitOpen{store: b.store, target: b.target, since: time.Now(), last: err}
	b.mu.Unlock()
	b.gauge.Set(1)
	b.log.Warn("store failing; circuit open, requests skip it until a probe succeeds",
		"store", b.store, "target", b.target, "err", err)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.probeLoop()
	}()
}

// probeLoop probes the store with a growing, jittered delay until it
// answers (then closes the breaker) or the server stops.
func (b *breaker) probeLoop() {
	delay := breakerMinDelay
	for {
		j := 1 + breakerJitter*(2*rand.Float64()-1)
		t := time.NewTimer(time.Duration(float64(delay) * j))
		select {
		case <-b.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(b.ctx, b.probeTimeout)
		err := b.probe(pctx)
		cancel()
		if err == nil {
			b.mu.Lock()
			down := time.Since(b.opened.since)
			b.opened = nil
			b.mu.Unlock()
			b.failures.Store(0)
			b.open.Store(false)
			b.gauge.Set(0)
			b.log.Info("store answers again; circuit closed", "store", b.store, "target", b.target, "down", down.Round(time.Millisecond))
			return
		}
		if b.ctx.Err() != nil {
			return
		}
		b.mu.Lock()
		// A new value: requests may hold the previous one.
		b.opened = &errCircuitOpen{store: b.store, target: b.target, since: b.opened.since, last: err}
		b.mu.Unlock()
		delay = min(2*delay, breakerMaxDelay)
	}
}

// stepDone reports a store step's outcome to br: a failure counts only when
// the request itself was still alive (a client that went away says nothing
// about the store) and the error is the store's (errNotStoreFault: no call
// was made, or the store answered and refused).
func stepDone(ctx context.Context, br *breaker, err error) {
	switch {
	case err == nil:
		br.success()
	case ctx.Err() != nil || errors.Is(err, errNotStoreFault) || errors.As(err, new(*pgconn.PgError)):
	default:
		br.failure(err)
	}
}

// errNotStoreFault marks a failed step that says nothing about the store's
// health: the breaker does not count it.
var errNotStoreFault = errors.New("not a store fault")

// noFault wraps errNotStoreFault into an error message without adding text
// (fmt.Errorf("...%w", noFault)).
var noFault error = silent{errNotStoreFault}

type silent struct{ err error }

func (silent) Error() string   { return "" }
func (s silent) Unwrap() error { return s.err }
