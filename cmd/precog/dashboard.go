package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/dashboard"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/lookup"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

func newDashboardCmd(g *globals) *cobra.Command {
	var (
		db, addr, tokensFile, jobsDir string
		insecure                      bool
		drain                         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dashboard [--addr :8081] [--db URL] [--jobs DIR]",
		Short: "Serve web pages of the runs, their shards, errors and throughput, and the jobs' schedules and staleness",
		Long: `Serve the dashboard: the runs with live progress, rows/s and ETA (filter by
job and state); one run's shard timeline by worker, rows committed over time,
errors by shard, the spec as submitted, and Cancel / Retry failed shards
buttons (the same as precog cancel and precog retry); with --jobs, each job's
schedule, next fire times, last run and staleness against max_staleness.

Ledger: the Postgres ledger (--db or PRECOG_DATABASE_URL), else the embedded
ledger under --state-dir, opened per request: while a precog run holds it the
pages say the ledger is busy.

What each action needs in the dashboard's process: the pages need only the
ledger. Retry needs only the ledger (the pool's workers, or the next precog
run, execute the shards). Cancel marks the run cancelled with the ledger
alone; removing what the run wrote needs the sinks' environment (the
${VARS} of its spec, e.g. DATABASE_URL, REDIS_ADDR). Without them the page
says "cancelled; sink cleanup pending: …": on the Postgres ledger a worker of
the run's pool, which has that environment, finishes the cleanup when it is
next idle; on the embedded ledger precog cancel RUN finishes it where the
environment is set.

Auth: tokens from PRECOG_API_TOKENS (comma-separated) or --tokens-file, as for
precog serve. Pages need a login with a token (an HttpOnly, SameSite=Strict
cookie) or an Authorization: Bearer header; actions are POSTs with a CSRF
token. Without tokens the dashboard refuses to start unless
--insecure-no-auth is given.`,
		Example: "  PRECOG_API_TOKENS=s3cret precog dashboard --addr :8081 --db postgres://precog@db/precog --jobs jobs/",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tokens, err := lookup.LoadTokens(tokensFile)
			if err != nil {
				return invalid(fmt.Errorf("--tokens-file: %w", err))
			}
			ctx := cmd.Context()
			opts := dashboard.Options{Tokens: tokens, InsecureNoAuth: insecure, JobsDir: jobsDir, Logger: g.log}
			if dsn := databaseURL(db); dsn != "" {
				led, err := openLedger(ctx, g, db)
				if err != nil {
					return err
				}
				defer led.Close()
				// The ledger itself (not the wrapper), so that pages see
				// its backfills too.
				opts.Source = dashboard.Shared{L: led.Store, Name: led.where}
				opts.Actions = clusterActions(led, drain, g.log)
			} else {
				opts.Source, opts.StateDir = dashboard.BoltDir{StateDir: g.stateDir}, g.stateDir
				// While a local backfill holds the ledger, the busy page
				// lists the runs of its snapshot.
				opts.BusySnapshot = func() (dashboard.BusySnapshot, bool) {
					snap, ok := backfill.ReadSnapshot(g.stateDir)
					return dashboard.BusySnapshot{PID: snap.PID, WrittenAt: snap.WrittenAt, Runs: snap.Runs}, ok
				}
				opts.Actions = dashboard.LocalActions(g.stateDir, g.log)
			}
			opts.BackfillActions = backfillActions(g, db, drain)
			srv, err := dashboard.New(opts)
			if err != nil {
				return invalid(err)
			}
			g.log.Info("dashboard", "url", dashboard.URL(addr), "ledger", opts.Source.Where(), "auth", len(tokens) > 0)
			return srv.ListenAndServe(ctx, addr)
		},
	}
	addDBFlag(cmd, &db)
	f := cmd.Flags()
	f.StringVar(&addr, "addr", ":8081", "listen address")
	f.StringVar(&jobsDir, "jobs", "", "directory of job specs for the Jobs page (schedules, staleness)")
	f.StringVar(&tokensFile, "tokens-file", "", "file of tokens, one per line (in addition to PRECOG_API_TOKENS)")
	f.BoolVar(&insecure, "insecure-no-auth", false, "serve without authentication (never in production)")
	f.DurationVar(&drain, "drain", 10*time.Second, "Postgres ledger: Cancel waits at most this long for workers to let go of the run's shards")
	return cmd
}

// clusterActions are the buttons over the Postgres ledger: the code of
// precog cancel and precog retry, their output as the message.
func clusterActions(led *openedLedger, drain time.Duration, log *slog.Logger) dashboard.Actions {
	return dashboard.Actions{
		Cancel: func(ctx context.Context, id string) (string, error) {
			var out bytes.Buffer
			err := cancelCluster(ctx, led, id, cancelOptions{drain: drain, out: &out, log: log})
			return strings.TrimSpace(out.String()), err
		},
		Retry: dashboard.LedgerRetry(led.Store, true, led.where),
	}
}

// serveRunUI serves the dashboard over the embedded ledger of a local run
// while it executes (precog run --ui ADDR): the run's process opens the
// ledger once and both use it. Tokens come from PRECOG_API_TOKENS.
func serveRunUI(ctx context.Context, g *globals, addr string, lopts *runner.LocalOptions) (stop func(), err error) {
	led, err := open.Open(ctx, open.Location{StateDir: g.stateDir}, open.Options{})
	if err != nil {
		return nil, err
	}
	stopUI, err := dashboard.ServeRunUI(ctx, dashboard.RunUIParams{Addr: addr, Ledger: led, StateDir: g.stateDir, Tokens: lookup.TokensFromEnv(), Logger: g.log})
	if err != nil {
		led.Close()
		return nil, invalid(err)
	}
	lopts.Ledger = led
	return func() { stopUI(); led.Close() }, nil
}
