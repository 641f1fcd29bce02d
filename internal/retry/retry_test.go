package retry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want Class
	}{
		{fmt.Errorf("shard 3: write: %w", &os.PathError{Op: "write", Path: "/out/x", Err: syscall.ENOSPC}), Permanent},
		{fmt.Errorf("open: %w", &os.PathError{Op: "open", Path: "/out", Err: syscall.EACCES}), Permanent},
		{&pgconn.PgError{Code: "42501", Message: "permission denied for table t"}, Permanent},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, Permanent},
		{&pgconn.PgError{Code: "53100", Message: "could not extend file"}, Permanent},
		{errors.New("NOPERM this user has no permissions"), Permanent},
		{fmt.Errorf("copy: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), Transient},
		{fmt.Errorf("x: %w", syscall.ECONNRESET), Transient},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, Transient},
		{&pgconn.PgError{Code: "40001"}, Transient},
		{errors.New("LOADING Redis is loading the dataset in memory"), Transient},
		{fmt.Errorf("w: %w", context.DeadlineExceeded), Transient},
		{errors.New("model output has the wrong shape"), Unknown},
		// Both in one chain: the permanent cause wins.
		{errors.Join(syscall.ECONNRESET, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}), Permanent},
	}
	for _, c := range cases {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func TestDelayBounded(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for n := range 40 {
		if d := p.Delay(n); d < 0 || d > 80*time.Millisecond {
			t.Fatalf("Delay(%d) = %v, outside [0, Max]", n, d)
		}
	}
}

func TestDoRidesOutTransientErrors(t *testing.T) {
	calls := 0
	err := Policy{Window: 2 * time.Second, Base: time.Millisecond, Max: 5 * time.Millisecond}.Do(context.Background(), func(context.Context) error {
		calls++
		if calls < 5 {
			return syscall.ECONNREFUSED
		}
		return nil
	})
	if err != nil || calls != 5 {
		t.Fatalf("Do = %v after %d calls, want success after 5", err, calls)
	}
	// Permanent errors stop at once.
	calls = 0
	err = Policy{}.Do(context.Background(), func(context.Context) error { calls++; return syscall.ENOSPC })
	if !errors.Is(err, syscall.ENOSPC) || calls != 1 {
		t.Fatalf("permanent: %v after %d calls, want one call", err, calls)
	}
	// The window bounds a transient streak.
	start := time.Now()
	err = Policy{Window: 100 * time.Millisecond, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}.Do(context.Background(), func(context.Context) error { return syscall.ECONNRESET })
	if !errors.Is(err, syscall.ECONNRESET) || time.Since(start) > time.Second {
		t.Fatalf("window: %v after %v", err, time.Since(start))
	}
}
