package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
)

// envDatabaseURL names the Postgres ledger when --db is not given.
const envDatabaseURL = "PRECOG_DATABASE_URL"

// addDBFlag adds --db to a cluster command. The URL is never printed nor
// logged (it may hold a password).
func addDBFlag(cmd *cobra.Command, dsn *string) {
	cmd.Flags().StringVar(dsn, "db", "", "Postgres ledger URL (default env "+envDatabaseURL+"); never printed")
}

// databaseURL is --db, else PRECOG_DATABASE_URL, else "".
func databaseURL(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(envDatabaseURL)
}

// openCluster opens the Postgres ledger at dsn, which a cluster command
// requires (exit 2 without one), as openStore does.
func openCluster(ctx context.Context, dsn string, opts open.Options) (ledger.Store, error) {
	if dsn == "" {
		return nil, invalid(fmt.Errorf("no Postgres ledger: pass --db URL or set %s", envDatabaseURL))
	}
	return openStore(ctx, open.Location{DSN: dsn}, opts)
}

// openStore opens the ledger at loc (open.Open), its errors in the CLI's
// terms: unreachable is exit 75 naming --db and the variable, a URL that
// does not parse is invalid (exit 2); a schema newer than this precog, a
// wrong password or a missing database are errors of their own (exit 1)
// with the ledger's message.
func openStore(ctx context.Context, loc open.Location, opts open.Options) (ledger.Store, error) {
	l, err := open.Open(ctx, loc, opts)
	var ue *open.UnreachableError
	var bad *open.BadURLError
	switch {
	case errors.As(err, &ue):
		err = fmt.Errorf("%w (--db / %s; retry later): %w", open.ErrUnreachable, envDatabaseURL, ue.Err)
		if ue.GaveUpAfter > 0 {
			err = fmt.Errorf("%w (gave up after %s)", err, ue.GaveUpAfter)
		}
	case errors.As(err, &bad):
		err = invalid(err)
	}
	return l, err
}

// openedLedger is the ledger runs/status/cancel/retry work on.
type openedLedger struct {
	ledger.Store
	// cluster is the Postgres ledger (nil for the embedded one).
	cluster ledger.Store
	// where names it in messages (never the URL).
	where string
}

// openLedger opens the Postgres ledger when --db or PRECOG_DATABASE_URL
// names one, else the embedded ledger under --state-dir.
func openLedger(ctx context.Context, g *globals, dbFlag string) (*openedLedger, error) {
	loc := open.Location{StateDir: g.stateDir, DSN: databaseURL(dbFlag)}
	l, err := openStore(ctx, loc, open.ForCommand(g.log))
	if err != nil {
		return nil, err
	}
	o := &openedLedger{Store: l, where: loc.String()}
	if loc.Postgres() {
		o.cluster = l
	}
	return o, nil
}

// stateDir is the state directory of the embedded ledger, "" for the
// Postgres ledger (runner.RunView).
func (o *openedLedger) stateDir(g *globals) string {
	if o.cluster != nil {
		return ""
	}
	return g.stateDir
}

// notFound is the error of a run id the ledger does not know (exit 2).
func (o *openedLedger) notFound(id string) error {
	return invalid(fmt.Errorf("run %s: not found in %s (see precog runs)", id, o.where))
}

// cancelOptions tune cancelCluster.
type cancelOptions struct {
	// drain bounds the wait for workers' leases on the run's shards.
	drain time.Duration
	// scanUnindexed: runner.CancelOptions.ScanUnindexed.
	scanUnindexed bool
	out           io.Writer
	log           *slog.Logger
}

// cancelCluster is `precog cancel RUN` on the Postgres ledger
// (runner.Cancel), printing what it did (runner.ReportCancel).
func cancelCluster(ctx context.Context, led *openedLedger, id string, o cancelOptions) error {
	res, err := runner.Cancel(ctx, led, id, runner.CancelOptions{Drain: o.drain, CleanAgain: true, ScanUnindexed: o.scanUnindexed, Log: o.log})
	if errors.Is(err, ledger.ErrNotFound) {
		return led.notFound(id)
	}
	return runner.ReportCancel(o.out, id, res, err)
}
