package sinks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lostWithin waits (bounded) for l to be lost and returns the one reason
// OnLost reported.
func lostWithin(t *testing.T, l *Lease, whys <-chan string) string {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(time.Minute):
		t.Fatal("the lease is not lost after a minute")
	}
	select {
	case why := <-whys:
		return why
	default:
		t.Fatal("Lost closed without OnLost")
		return ""
	}
}

// TestLease: a renewal that finds the lock gone loses the lease at once
// with its reason; renewals that keep failing lose it when it runs out,
// naming the last failure; Stop ends renewing and loses nothing; OnLost
// is called once however the lease is lost.
func TestLease(t *testing.T) {
	params := func(renew func(context.Context) error, whys chan<- string) LeaseParams {
		return LeaseParams{TTL: 30 * time.Millisecond, Renew: renew, OnLost: func(why string) { whys <- why }}
	}
	t.Run("gone", func(t *testing.T) {
		whys := make(chan string, 2)
		// Taken an hour ahead: only the renewal can lose it.
		l := StartLease(time.Now().Add(time.Hour), params(func(context.Context) error {
			return fmt.Errorf("%w: taken over", ErrLeaseGone)
		}, whys))
		defer l.Stop()
		if why := lostWithin(t, l, whys); !strings.Contains(why, "taken over") {
			t.Errorf("lost: %q, want the renewal's reason", why)
		}
		l.MarkLost("again")
		if len(whys) != 0 {
			t.Errorf("OnLost called again: %q", <-whys)
		}
	})
	t.Run("renewals fail until it runs out", func(t *testing.T) {
		whys := make(chan string, 2)
		var mu sync.Mutex
		tries := 0
		l := StartLease(time.Now(), params(func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			tries++
			return errors.New("connection refused")
		}, whys))
		defer l.Stop()
		why := lostWithin(t, l, whys)
		if !strings.Contains(why, "not renewed within its 30ms lease") {
			t.Errorf("lost: %q, want it ran out", why)
		}
		mu.Lock()
		defer mu.Unlock()
		if tries > 0 && !strings.Contains(why, "last renewal: connection refused") {
			t.Errorf("lost: %q after %d failed renewals, want the last one named", why, tries)
		}
	})
	t.Run("stop", func(t *testing.T) {
		whys := make(chan string, 1)
		renewing := make(chan struct{})
		var once sync.Once
		l := StartLease(time.Now().Add(time.Hour), LeaseParams{TTL: time.Second, OnLost: func(why string) { whys <- why },
			Renew: func(context.Context) error { once.Do(func() { close(renewing) }); return nil }})
		select {
		case <-renewing:
		case <-time.After(time.Minute):
			t.Fatal("no renewal in a minute")
		}
		l.Stop()
		l.Stop()
		select {
		case <-l.Lost():
			t.Fatalf("Stop lost the lease: %q", <-whys)
		default:
		}
	})
}
