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

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
)

// envDatabaseURL names the Postgres ledger when --db is not given.
const envDatabaseURL = "PRECOG_DATABASE_URL"

// errLedgerUnreachable: the Postgres ledger could not be reached (down,
// restarting, a network problem); main maps it to exit 75, retry later.
var errLedgerUnreachable = errors.New("the Postgres ledger is unreachable")

// ledgerOpenTimeout bounds connecting to the Postgres ledger, so that an
// address nobody answers fails in seconds instead of hanging.
const ledgerOpenTimeout = 15 * time.Second

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
func openCluster(ctx context.Context, dsn string, opts postgres.Options) (*postgres.Ledger, error) {
	if dsn == "" {
		return nil, invalid(fmt.Errorf("no Postgres ledger: pass --db URL or set %s", envDatabaseURL))
	}
	octx, cancel := context.WithTimeout(ctx, ledgerOpenTimeout)
	defer cancel()
	l, err := postgres.Open(octx, dsn, opts)
	switch {
	case err == nil:
		return l, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case unreachable(err) || octx.Err() != nil:
		return nil, fmt.Errorf("%w (--db / %s; retry later): %w", errLedgerUnreachable, envDatabaseURL, err)
	}
	if _, perr := pgconn.ParseConfig(dsn); perr != nil {
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
	ledger.Ledger
	// cluster is the Postgres ledger (nil for the embedded one).
	cluster *postgres.Ledger
	// where names it in messages (never the URL).
	where string
}

// openLedger opens the Postgres ledger when --db or PRECOG_DATABASE_URL
// names one, else the embedded ledger under --state-dir.
func openLedger(ctx context.Context, g *globals, dbFlag string) (*openedLedger, error) {
	if dsn := databaseURL(dbFlag); dsn != "" {
		l, err := openCluster(ctx, dsn, cliLedgerOptions(g.log))
		if err != nil {
			return nil, err
		}
		return &openedLedger{Ledger: l, cluster: l, where: "the Postgres ledger"}, nil
	}
	l, err := bolt.OpenIn(g.stateDir)
	if err != nil {
		return nil, err
	}
	return &openedLedger{Ledger: l, where: g.stateDir}, nil
}

// notFound is the error of a run id the ledger does not know (exit 2).
func (o *openedLedger) notFound(id string) error {
	return invalid(fmt.Errorf("run %s: not found in %s (see precog runs)", id, o.where))
}

// cancelOptions tune cancelCluster.
type cancelOptions struct {
	// drain bounds the wait for workers' leases on the run's shards.
	drain time.Duration
	out   io.Writer
	log   *slog.Logger
}

// cancelCluster marks a run of the Postgres ledger cancelled, waits for the
// workers holding its shards to let go, then aborts it in every sink.
func cancelCluster(ctx context.Context, led *openedLedger, id string, o cancelOptions) error {
	run, err := led.Run(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return led.notFound(id)
	} else if err != nil {
		return err
	}
	again := false
	switch {
	case run.State == jobs.RunCancelled:
		again = true
	case run.State.Terminal():
		return invalid(fmt.Errorf("run %s is %s: %w", id, run.State, runner.ErrNotCancellable))
	}
	if !again {
		// The ledger decides under the run's lock: a run in its publish
		// step is refused, never cancelled between two sinks.
		err := led.SetRunState(ctx, id, jobs.RunCancelled, "cancelled by precog cancel")
		if errors.Is(err, ledger.ErrPublishing) {
			return invalid(fmt.Errorf("run %s is publishing (its results are being made visible in every sink): cancelling now could leave the sinks on different versions; it finishes in moments (a worker takes over a publish whose worker died): %w", id, err))
		}
		if errors.Is(err, ledger.ErrRunFinished) {
			run, _ = led.Run(ctx, id)
			return invalid(fmt.Errorf("run %s finished meanwhile (%s): %w", id, run.State, runner.ErrNotCancellable))
		} else if err != nil {
			return err
		}
		fmt.Fprintf(o.out, "run %s cancelled\n", id)
	} else {
		fmt.Fprintf(o.out, "run %s was already cancelled; cleaning its sinks again\n", id)
	}
	if err := drainLeases(ctx, led, id, o); err != nil {
		return err
	}
	return abortSinks(ctx, run, o)
}

// drainPoll is how often cancel looks for the holders of a cancelled
// run's shards: each holder clears its lease mark as it stops (Release),
// so cancel returns within a poll of the last one stopping.
const drainPoll = 200 * time.Millisecond

// drainLeases waits, at most o.drain, until no worker holds a live lease
// on a shard of the cancelled run: the cancel ended its shards, and each
// one's holder lease mark stays until that holder stops (or its lease
// runs out, when it died). Leases are on the database's clock: the run's
// updated_at (the cancel, stamped by the database) anchors it.
func drainLeases(ctx context.Context, led *openedLedger, id string, o cancelOptions) error {
	run, err := led.Run(ctx, id)
	if err != nil {
		return err
	}
	anchor, start := run.UpdatedAt, time.Now()
	deadline := start.Add(o.drain)
	told := false
	for {
		shards, err := led.Shards(ctx, id)
		if err != nil {
			return err
		}
		dbNow := anchor.Add(time.Since(start))
		held := 0
		for _, s := range shards {
			if (s.State == jobs.ShardRunning || s.State == jobs.ShardFailed) && s.LeaseUntil.After(dbNow) {
				held++
			}
		}
		if held == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			o.log.Warn("workers still hold shards of the cancelled run; cleaning its sinks anyway (run cancel again later to clean what they write meanwhile)",
				"run", id, "shards", held, "waited", o.drain)
			return nil
		}
		if !told {
			o.log.Info("waiting for the workers holding shards of the run to stop", "run", id, "shards", held, "at_most", o.drain)
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// abortSinks removes an unpublished run's data from every sink of the
// spec it recorded, expanded with this process's environment.
func abortSinks(ctx context.Context, run jobs.Run, o cancelOptions) error {
	if len(run.Spec) == 0 {
		fmt.Fprintf(o.out, "the run recorded no spec: its sinks were not cleaned\n")
		return nil
	}
	spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("run %s: its recorded spec (%s): %w", run.ID, run.SpecFile, err)
	}
	snks, err := runner.OpenSinks(ctx, spec)
	if err != nil {
		return fmt.Errorf("run %s: open its sinks to clean them: %w", run.ID, err)
	}
	defer func() {
		for _, s := range snks {
			s.Close()
		}
	}()
	info := sinks.RunInfo{Job: run.Job, RunID: run.ID, Version: run.Version, Params: run.Params}
	var errs []error
	for _, s := range snks {
		if err := s.Abort(ctx, info); err != nil {
			errs = append(errs, fmt.Errorf("sink %s: abort run %s: %w", s.Name(), run.ID, err))
			continue
		}
		fmt.Fprintf(o.out, "  %s: removed the data of version %s\n", s.Name(), run.Version)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w (the run is cancelled; run precog cancel %s again to retry the cleanup)", err, run.ID)
	}
	return nil
}
