// Package retry classifies errors as transient (a store restarting, a
// network blip: retry with backoff) or permanent (a full disk, a permission,
// bad data: retrying cannot help, fail at once with the cause), and spaces
// retries with exponential backoff and full jitter over a bounded window.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what a caller should do about an error.
type Class int

const (
	// Unknown errors are retried a bounded number of times (max_attempts).
	Unknown Class = iota
	// Transient errors are retried with backoff within a time window.
	Transient
	// Permanent errors fail at once: retrying cannot help.
	Permanent
)

func (c Class) String() string {
	return [...]string{"unknown", "transient", "permanent"}[c]
}

// Classify decides what err is. Permanent wins over transient when both
// appear in a chain (a full disk reported through a closed connection is a
// full disk).
func Classify(err error) Class {
	if err == nil {
		return Unknown
	}
	if isPermanent(err) {
		return Permanent
	}
	if isTransient(err) {
		return Transient
	}
	return Unknown
}

// permanenter is implemented by errors that know retrying cannot help
// (sinks.DuplicateKeyError, sinks.NotOwnedError).
type permanenter interface{ Permanent() bool }

func isPermanent(err error) bool {
	var p permanenter
	if errors.As(err, &p) && p.Permanent() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EACCES, syscall.EPERM, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "53100": // disk_full
			return true
		case strings.HasPrefix(pg.Code, "42"): // syntax error or access rule violation (permissions, undefined column…)
			return true
		case strings.HasPrefix(pg.Code, "22"), strings.HasPrefix(pg.Code, "23"): // data exception, integrity violation
			return true
		case pg.Code == "28000", pg.Code == "28P01": // invalid authorization, password
			return true
		}
	}
	msg := err.Error()
	for _, s := range []string{"NOPERM", "WRONGPASS", "OOM command not allowed", "READONLY"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func isTransient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	if errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "40001", "40P01", // serialization failure, deadlock
			"55P03",                   // lock_not_available: a lock_timeout fired; the holder lets go
			"57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"53300", "08000", "08003", "08006", "08001", "08004": // too many connections, connection exceptions
			return true
		}
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "connection refused", "connection reset",
		"broken pipe", "the database system is starting up", "the database system is shutting down", "server closed the connection",
		"conn closed", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Policy spaces retries of transient errors.
type Policy struct {
	// Window is how long transient errors are retried, counted from the
	// first failure of a streak (0: 60s, which rides out a store restart;
	// negative: no retries).
	Window time.Duration
	// Base is the first delay (default 100ms); each retry doubles it up to
	// Max (default 5s). The delay slept is uniform in [0, delay] (full jitter).
	Base, Max time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.Window == 0 {
		p.Window = 60 * time.Second
	}
	if p.Base <= 0 {
		p.Base = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Second
	}
	return p
}

// Delay is the jittered delay before retry number n (0-based).
func (p Policy) Delay(n int) time.Duration {
	p = p.withDefaults()
	d := p.Base << min(n, 30)
	if d <= 0 || d > p.Max {
		d = p.Max
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// Do calls fn until it succeeds, returns an error that is not transient,
// the window since the first failure has passed, or ctx is done. It returns
// fn's last error.
func (p Policy) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	p = p.withDefaults()
	var first time.Time
	for n := 0; ; n++ {
		err := fn(ctx)
		if err == nil || p.Window < 0 || Classify(err) != Transient {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		}
		d := p.Delay(n)
		if time.Since(first)+d > p.Window {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
