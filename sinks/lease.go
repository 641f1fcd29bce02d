package sinks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrLeaseGone is what a LeaseParams.Renew returns (wrapped, with why)
// when the lock is not this holder's any more (taken over, deleted): the
// lease is lost at once, whatever time it has left.
var ErrLeaseGone = errors.New("the lock is not this holder's any more")

// LeaseParams is what a sink's lock gives the Lease that keeps it.
type LeaseParams struct {
	// TTL is the lease: one renewal extends it to TTL from its start.
	TTL time.Duration
	// Margin shortens how long this process trusts a renewal (until its
	// start plus TTL less Margin), for stores whose expiry another
	// process reads on its own clock.
	Margin time.Duration
	// Renew extends the lease once, within ctx (its deadline is when this
	// process stops trusting the lease): nil when extended, an error
	// wrapping ErrLeaseGone when the lock is not this holder's any more,
	// another error when the store did not answer (retried at the next
	// tick while the lease lasts).
	Renew func(ctx context.Context) error
	// OnLost reports, once, why the lease was lost: the holder must stop
	// writing.
	OnLost func(why string)
	// OnRetry reports a renewal that failed and is retried.
	OnRetry func(err error)
}

// Lease keeps a held lock's lease, the one renewer of every sink's lock
// (a Redis key, a Postgres row, a lease file, a lock object): it renews
// every TTL/3 until Stop, and closes Lost once the lease cannot be
// guaranteed: a renewal found the lock gone, or none succeeded before the
// time this process trusted the last one to last (a frozen or cut-off
// holder stops itself on its own monotonic clock).
type Lease struct {
	p LeaseParams

	mu      sync.Mutex
	until   time.Time
	lastErr error

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	frozen   atomic.Bool
}

// StartLease starts keeping a lease taken at start (the time the request
// that took it was sent).
func StartLease(start time.Time, p LeaseParams) *Lease {
	l := &Lease{p: p, until: start.Add(p.TTL - p.Margin),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// Lost is closed once the lease is lost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// MarkLost loses the lease (a fencing check found it taken over); the
// first why is reported.
func (l *Lease) MarkLost(why string) {
	l.lostOnce.Do(func() {
		if l.p.OnLost != nil {
			l.p.OnLost(why)
		}
		close(l.lost)
	})
}

// Until is when this process stops trusting the lease unless renewed.
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Stop stops renewing and waits for a renewal in flight. Idempotent.
func (l *Lease) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// Freeze stops renewals as a holder that hangs would (tests).
func (l *Lease) Freeze() { l.frozen.Store(true) }

func (l *Lease) run() {
	defer close(l.done)
	tick := time.NewTicker(l.p.TTL / 3)
	defer tick.Stop()
	for {
		expire := time.NewTimer(time.Until(l.Until()))
		select {
		case <-l.stop:
			expire.Stop()
			return
		case <-l.lost:
			expire.Stop()
			return
		case <-expire.C:
			l.MarkLost(l.expired())
			return
		case <-tick.C:
			expire.Stop()
		}
		if l.frozen.Load() {
			continue
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), l.Until())
		err := l.p.Renew(ctx)
		cancel()
		switch {
		case errors.Is(err, ErrLeaseGone):
			l.MarkLost(err.Error())
			return
		case err != nil:
			l.mu.Lock()
			l.lastErr = err
			l.mu.Unlock()
			if l.p.OnRetry != nil {
				l.p.OnRetry(err)
			}
		default:
			l.mu.Lock()
			l.until, l.lastErr = start.Add(l.p.TTL-l.p.Margin), nil
			l.mu.Unlock()
		}
	}
}

// expired says why a lease ran out: its last failed renewal, if any.
func (l *Lease) expired() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	why := fmt.Sprintf("not renewed within its %s lease", l.p.TTL)
	if l.lastErr != nil {
		why += " (last renewal: " + l.lastErr.Error() + ")"
	}
	return why
}
