package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
)

// envDatabaseURL names the Postgres ledger when --db is not given.
const envDatabaseURL = "PRECOG_DATABASE_URL"

// errLedgerUnreachable: the Postgres ledger could not be reached (down,
// restarting, a network problem); main maps it to exit 75, retry later.
var errLedgerUnreachable = errors.New("the Postgres ledger is unreachable")

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

// openCluster opens the Postgres ledger at dsn. Unreachable is
// errLedgerUnreachable (exit 75); a URL that does not parse is invalid
// (exit 2); a schema newer than this precog, a wrong password or a missing
// database are errors of their own (exit 1) with the ledger's message.
func openCluster(ctx context.Context, dsn string, opts postgres.Options) (ledger.Store, error) {
	if dsn == "" {
		return nil, invalid(fmt.Errorf("no Postgres ledger: pass --db URL or set %s", envDatabaseURL))
	}
	return openStore(ctx, open.Location{DSN: dsn}, open.Options{Postgres: opts})
}

// openClusterWaiting is openCluster for a long-lived process (a worker):
// while the ledger is unreachable (a Postgres restart or failover as the
// process starts) it retries with jittered backoff for up to wait, logging
// each failure, then gives up with errLedgerUnreachable (exit 75). Any other
// error is returned at once.
func openClusterWaiting(ctx context.Context, dsn string, opts postgres.Options, wait time.Duration, log *slog.Logger) (ledger.Store, error) {
	policy := retry.Policy{Window: wait, Base: 200 * time.Millisecond, Max: 5 * time.Second}
	began := time.Now()
	for n := 0; ; n++ {
		l, err := openCluster(ctx, dsn, opts)
		if err == nil || !errors.Is(err, errLedgerUnreachable) || wait <= 0 {
			return l, err
		}
		d := policy.Delay(n)
		if time.Since(began)+d > wait {
			return nil, fmt.Errorf("%w (gave up after %s)", err, time.Since(began).Round(time.Millisecond))
		}
		log.Warn("ledger unreachable; retrying", "attempt", n+1, "in", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// openStore opens the ledger at loc (open.Open chooses which), mapping the
// Postgres ledger's errors to exit codes as openCluster says.
func openStore(ctx context.Context, loc open.Location, opts open.Options) (ledger.Store, error) {
	l, err := open.Open(ctx, loc, opts)
	switch {
	case err == nil || !loc.Postgres():
		return l, err
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case unreachable(err):
		return nil, fmt.Errorf("%w (--db / %s; retry later): %w", errLedgerUnreachable, envDatabaseURL, err)
	}
	if _, perr := pgconn.ParseConfig(loc.DSN); perr != nil {
		return nil, invalid(err)
	}
	return nil, err
}

// cliLedgerOptions opens the ledger for a command that never waits on Wake:
// no LISTEN connection, a few connections.
func cliLedgerOptions(log *slog.Logger) postgres.Options {
	return postgres.Options{PollOnly: true, MaxConns: 4, Logger: log}
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
	l, err := openStore(ctx, loc, open.Options{Postgres: cliLedgerOptions(g.log)})
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
// (runner.Cancel), printing what it did.
func cancelCluster(ctx context.Context, led *openedLedger, id string, o cancelOptions) error {
	res, err := runner.Cancel(ctx, led, id, runner.CancelOptions{Drain: o.drain, CleanAgain: true, ScanUnindexed: o.scanUnindexed, Log: o.log})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return led.notFound(id)
	case errors.Is(err, ledger.ErrPublishing):
		return invalid(fmt.Errorf("run %s is publishing (its results are being made visible in every sink): cancelling now could leave the sinks on different versions; it finishes in moments (a worker takes over a publish whose worker died): %w", id, err))
	case errors.Is(err, runner.ErrNotCancellable):
		return invalid(err)
	}
	var pending *runner.CleanupPendingError
	switch {
	case errors.As(err, &pending):
		// The run is cancelled: say so, and who finishes the cleanup.
		fmt.Fprintln(o.out, pending.Error())
		if pending.Recorded {
			return nil
		}
		return err
	case res.Again:
		fmt.Fprintf(o.out, "run %s was already cancelled; cleaning its sinks again\n", id)
	case res.Run.ID != "":
		fmt.Fprintf(o.out, "run %s cancelled\n", id)
	}
	if err != nil {
		return err
	}
	printCleaned(o.out, res)
	return nil
}

// printCleaned says which sinks the cancelled run's data was removed from.
func printCleaned(out io.Writer, res runner.CancelResult) {
	if res.NoSpec {
		fmt.Fprintf(out, "the run recorded no spec: its sinks were not cleaned\n")
	}
	for _, name := range res.Cleaned {
		fmt.Fprintf(out, "  %s: removed the data of version %s\n", name, res.Run.Version)
	}
}
