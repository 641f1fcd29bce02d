package open

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
)

// ErrUnreachable: the Postgres ledger could not be reached (down,
// restarting, a network problem); the same call may succeed later.
var ErrUnreachable = errors.New("the Postgres ledger is unreachable")

// UnreachableError is Open's error when the Postgres ledger could not be
// reached; errors.Is(err, ErrUnreachable).
type UnreachableError struct {
	// Err is the driver's error (it never holds the URL).
	Err error
	// GaveUpAfter is how long Options.WaitUnreachable retried before
	// giving up; 0 when Open did not retry.
	GaveUpAfter time.Duration
}

func (e *UnreachableError) Error() string {
	s := ErrUnreachable.Error() + " (retry later): " + e.Err.Error()
	if e.GaveUpAfter > 0 {
		s += fmt.Sprintf(" (gave up after %s)", e.GaveUpAfter)
	}
	return s
}

// Unwrap is ErrUnreachable and the driver's error.
func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// BadURLError is Open's error when the Postgres ledger's URL does not
// parse: a usage error, which retrying cannot mend.
type BadURLError struct{ Err error }

func (e *BadURLError) Error() string { return e.Err.Error() }
func (e *BadURLError) Unwrap() error { return e.Err }

// unreachableRetry paces Options.WaitUnreachable's retries.
var unreachableRetry = retry.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}

// openPostgres opens the Postgres ledger at dsn, classifying its errors
// (Open) and, for Options.WaitUnreachable, retrying while it is
// unreachable.
func openPostgres(ctx context.Context, dsn string, opts Options) (ledger.Store, error) {
	began := time.Now()
	for n := 0; ; n++ {
		l, err := openPostgresOnce(ctx, dsn, opts.Postgres)
		var ue *UnreachableError
		if err == nil || !errors.As(err, &ue) || opts.WaitUnreachable <= 0 {
			return l, err
		}
		d := unreachableRetry.Delay(n)
		if time.Since(began)+d > opts.WaitUnreachable {
			ue.GaveUpAfter = time.Since(began).Round(time.Millisecond)
			return nil, ue
		}
		log := opts.Postgres.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("ledger unreachable; retrying", "attempt", n+1, "in", d.Round(time.Millisecond), "err", ue.Err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// openPostgresOnce is one attempt of openPostgres, within ConnectTimeout.
func openPostgresOnce(ctx context.Context, dsn string, opts postgres.Options) (ledger.Store, error) {
	octx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	l, err := postgres.Open(octx, dsn, opts)
	switch {
	case err == nil:
		return l, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case unreachable(err):
		return nil, &UnreachableError{Err: err}
	}
	if _, perr := pgconn.ParseConfig(dsn); perr != nil {
		return nil, &BadURLError{Err: err}
	}
	return nil, err
}

// unreachable reports whether err means the database could not be reached
// at all, as opposed to refusing us (authentication, no such database).
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57P01..57P03: shutting down, starting up; 08xxx: connection failures.
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || strings.HasPrefix(pgErr.Code, "08")
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
