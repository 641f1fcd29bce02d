package open

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
)

// TestOpenClassifiesPostgresErrors: nobody listening is an
// *UnreachableError (ErrUnreachable), a URL that does not parse a
// *BadURLError, a missing database neither; no message holds the URL's
// password.
func TestOpenClassifiesPostgresErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Open(ctx, Location{DSN: "postgres://u:leak-me@127.0.0.1:1/db?sslmode=disable&connect_timeout=5"}, Options{})
	var ue *UnreachableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnreachable) || ue.GaveUpAfter != 0 || strings.Contains(err.Error(), "leak-me") {
		t.Fatalf("Open of a port nobody listens on = %v, want an *UnreachableError without the password", err)
	}
	_, err = Open(ctx, Location{DSN: "postgres://u:leak-me@127.0.0.1:notaport/db"}, Options{})
	var bad *BadURLError
	if !errors.As(err, &bad) || errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "leak-me") {
		t.Fatalf("Open of a URL that does not parse = %v, want a *BadURLError without the password", err)
	}
	pg := testservers.Postgres(t)
	_, err = Open(ctx, Location{DSN: strings.Replace(pg.DSN, "/"+pg.Database+"?", "/no_such_db?", 1)}, Options{})
	if err == nil || errors.As(err, &ue) || errors.As(err, &bad) {
		t.Fatalf("Open of a missing database = %v, want an error neither unreachable nor a bad URL", err)
	}
}

// retryLog counts "ledger unreachable; retrying" records and tells ready
// on the first.
type retryLog struct {
	mu    sync.Mutex
	n     int
	first chan struct{}
}

func (r *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (r *retryLog) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "ledger unreachable; retrying" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n++; r.n == 1 {
		close(r.first)
	}
	return nil
}
func (r *retryLog) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *retryLog) WithGroup(string) slog.Handler      { return r }

// TestOpenWaitsForUnreachable: with WaitUnreachable, Open retries a
// Postgres ledger that is down, logging each retry, and opens it once it
// is back; past the wait it gives up with an *UnreachableError saying how
// long it tried. Without it, Open fails at once.
func TestOpenWaitsForUnreachable(t *testing.T) {
	ctx := context.Background()
	pg := testservers.NewPostgres(t)
	pg.Stop(t)

	rl := &retryLog{first: make(chan struct{})}
	_, err := Open(ctx, Location{DSN: pg.DSN}, Options{Postgres: postgres.Options{Logger: slog.New(rl)}})
	if !errors.Is(err, ErrUnreachable) || rl.n != 0 {
		t.Fatalf("Open without a wait = %v after %d retries, want unreachable at once", err, rl.n)
	}
	_, err = Open(ctx, Location{DSN: pg.DSN}, Options{Postgres: postgres.Options{Logger: slog.New(rl)}, WaitUnreachable: 500 * time.Millisecond})
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.GaveUpAfter <= 0 || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("Open with a 500ms wait = %v, want an *UnreachableError that gave up within it", err)
	}

	rl = &retryLog{first: make(chan struct{})}
	type result struct {
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := Open(ctx, Location{DSN: pg.DSN}, Options{Postgres: postgres.Options{Logger: slog.New(rl), PollInterval: time.Hour}, WaitUnreachable: 5 * time.Minute})
		if err == nil {
			l.Close()
		}
		done <- result{err}
	}()
	select {
	case <-rl.first:
	case r := <-done:
		t.Fatalf("Open returned (%v) before retrying the ledger that is down", r.err)
	}
	pg.Start(t)
	if r := <-done; r.err != nil {
		t.Fatalf("Open once the ledger is back: %v", r.err)
	}
}
