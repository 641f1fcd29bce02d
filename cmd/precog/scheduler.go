package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/opsserver"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/jobs/scheduler"
	"github.com/precog-ml/precog/runner"
)

func newSchedulerCmd(g *globals) *cobra.Command {
	var (
		dir  string
		db   string
		addr string
		ttl  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "scheduler --jobs DIR",
		Short: "Fire the cron runs of every scheduled job in a directory",
		Long: `Fire a run of each job spec of --jobs whose schedule says so, exactly once per
tick: the tick (job, scheduled time) is unique in the ledger and commits with
its run, so two replicas that both believe they lead still create one run.

With a database (--db or PRECOG_DATABASE_URL) it creates runs for the workers;
run two or more replicas: they elect one leader with a lease (--lease), and a
leader that cannot renew stops firing before its lease ends. Without one it
runs each fired job in this process, in turn, with the embedded ledger (a
second scheduler on the same --state-dir is refused).

Runs get the params date (the tick's date in the job's time zone) and
scheduled_for (RFC 3339). The spec's concurrency (forbid, replace, allow),
catchup (none, latest, all with max_catchup) and starting_deadline decide what
a tick does when a run is open or the scheduler was down; every decision is
logged and recorded as a tick (fired, skipped, missed). SIGHUP, or a change
in the directory, reloads the specs: a bad one is refused by file and field
(logged once per change) while the others keep firing, and a job whose file
broke keeps firing with its last good spec, its ticks recording the error; a
job whose file is deleted is unscheduled. A new job's first tick is the first
after a scheduler first saw it (recorded in the ledger), so a failover or a
restart right before that tick does not lose it. --addr serves /healthz, /readyz and /metrics
(leader, ticks, precog_job_last_success_timestamp_seconds, precog_job_stale).`,
		Example: `  PRECOG_DATABASE_URL=postgres://… precog scheduler --jobs jobs/ --addr :9090
  precog scheduler --jobs jobs/        # single machine: fires and runs the jobs itself`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return invalid(errors.New("--jobs: required (the directory of job specs)"))
			}
			ctx := cmd.Context()
			led, embedded, closeLed, err := openSchedulerLedger(ctx, g, databaseURL(db))
			if err != nil {
				return err
			}
			defer closeLed()
			src := scheduler.Dir{Path: dir}
			hooks := runner.Scheduled{Ledger: led, StateDir: g.stateDir, Logger: g.log}
			opts := scheduler.Options{Specs: src, Ledger: led, LeaseTTL: ttl, Logger: g.log, Plan: hooks.Plan, Cancel: hooks.Cancel}
			if embedded {
				opts.OnFired = hooks.Fired
			}
			s := scheduler.New(opts)
			if errs := s.Load(); len(errs) > 0 {
				return invalid(errors.Join(errs...))
			}
			// Leader or standby, a replica is ready.
			stop, err := opsserver.Serve(ctx, opsserver.Params{Addr: addr, Flag: "--addr", Log: g.log, Collectors: scheduler.Metrics()})
			if err != nil {
				return invalid(err)
			}
			defer stop()
			go scheduler.Watch(ctx, scheduler.WatchParams{Stamp: src.Stamp, Reload: s.Reload})
			return s.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&dir, "jobs", "", "directory of job specs (*.yaml, *.yml); those with a schedule fire")
	addDBFlag(cmd, &db)
	cmd.Flags().StringVar(&addr, "addr", "", "serve /healthz, /readyz and /metrics on this address, e.g. :9090")
	cmd.Flags().DurationVar(&ttl, "lease", 15*time.Second, "leader lease; renewed every third of it")
	return cmd
}

// openSchedulerLedger opens the Postgres ledger, or the embedded one (which
// a second process cannot open: one scheduler per state directory).
func openSchedulerLedger(ctx context.Context, g *globals, dsn string) (ledger.Store, bool, func(), error) {
	loc := open.Location{StateDir: g.stateDir, DSN: dsn}
	l, err := openStore(ctx, loc, open.Options{Postgres: pgledger.Options{PollOnly: true, Logger: g.log}})
	if err != nil && !loc.Postgres() {
		return nil, false, nil, fmt.Errorf("scheduler: %w (one scheduler per state directory)", err)
	} else if err != nil {
		return nil, false, nil, err
	}
	return l, !loc.Postgres(), func() { l.Close() }, nil
}
