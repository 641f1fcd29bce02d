// Package open is the one place that chooses and opens a ledger: the
// Postgres ledger when a Location names a database, else the embedded
// ledger (bolt) of a state directory. Every command, the runner and the
// dashboard open theirs here.
//
// It is a package of its own, not ledger.Open: both backends import
// package ledger (its interfaces, params and errors), so ledger importing
// them would be an import cycle. Nor do the backends register themselves
// with ledger from init(): a binary that forgot a blank import would then
// learn it only at run time; here the compiler links both.
package open

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
)

// Location says which ledger to open: the Postgres ledger at DSN when it
// is set, else the embedded ledger in StateDir.
type Location struct {
	// StateDir holds the embedded ledger's file.
	StateDir string
	// DSN is the Postgres ledger's URL; never logged nor put in errors
	// (it may hold a password).
	DSN string
}

// Postgres reports whether l names the Postgres ledger.
func (l Location) Postgres() bool { return l.DSN != "" }

// String names the ledger in messages, never with the URL.
func (l Location) String() string {
	if l.Postgres() {
		return "the Postgres ledger"
	}
	return l.StateDir
}

// Options tune the opened ledger. The zero value is usable.
type Options struct {
	// Postgres tunes the Postgres ledger's connections.
	Postgres postgres.Options
	// Wait bounds the embedded ledger's wait for another process's
	// transaction (default bolt.LockWait): a dashboard page waits less.
	Wait time.Duration
	// WaitUnreachable is how long a long-lived process (a worker) keeps
	// retrying, with jittered backoff, a Postgres ledger that is
	// unreachable as it starts (a restart or failover under a rolling
	// deploy), logging each failure to Postgres.Logger; then Open gives
	// up with an *UnreachableError. 0: no retry, as a command wants.
	WaitUnreachable time.Duration
	// Existing refuses to create an embedded ledger that does not exist
	// yet: ErrNoLedger, naming the file. For commands that only read
	// what runs left (gc, rollback, schedule list), where a missing file
	// most likely means a wrong --state-dir.
	Existing bool
}

// ForCommand are the options of a command that never waits on Wake (runs,
// status, cancel, submit, gc): no LISTEN connection, a few connections.
func ForCommand(log *slog.Logger) Options {
	return Options{Postgres: postgres.Options{PollOnly: true, MaxConns: 4, Logger: log}}
}

// ErrNoLedger: Options.Existing and the state directory has no embedded
// ledger.
var ErrNoLedger = errors.New("no ledger")

// ConnectTimeout bounds connecting to the Postgres ledger, so that an
// address nobody answers fails in seconds instead of hanging.
const ConnectTimeout = 15 * time.Second

// Open opens the ledger at loc. The Postgres ledger's errors are
// classified: unreachable (down, restarting, a network problem) is an
// *UnreachableError (errors.Is ErrUnreachable: retry later), a URL that
// does not parse a *BadURLError (retrying cannot help), a cancelled ctx
// ctx.Err(); any other (a schema newer than this precog, a wrong password,
// no such database) is the backend's own. The embedded ledger held past
// the wait is ledger.ErrBusy.
func Open(ctx context.Context, loc Location, opts Options) (ledger.Store, error) {
	if loc.Postgres() {
		return openPostgres(ctx, loc.DSN, opts)
	}
	if loc.StateDir == "" {
		return nil, errors.New("ledger: no location: neither a state directory nor a Postgres URL")
	}
	path := bolt.PathIn(loc.StateDir)
	if opts.Existing {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s", ErrNoLedger, path)
		}
	}
	wait := opts.Wait
	if wait <= 0 {
		wait = bolt.LockWait
	}
	l, err := bolt.OpenWait(path, wait)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// ReadSnapshot returns the snapshot that the live process holding the
// ledger at loc keeps (ledger.Snapshots), for a reader that found it busy;
// ok false when there is none. The Postgres ledger keeps none.
func ReadSnapshot(loc Location) (ledger.Snapshot, bool) {
	if loc.Postgres() {
		return ledger.Snapshot{}, false
	}
	return bolt.ReadSnapshot(loc.StateDir)
}
