package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

// msgInterruptWait is what Ctrl-C says while submit --wait or retry --wait
// follows a cluster run.
const msgInterruptWait = "\ninterrupted: stopped following; the run keeps going on the workers (precog status RUN --watch follows it, precog cancel RUN stops it)"

func newSubmitCmd(g *globals) *cobra.Command {
	var (
		params     []string
		priority   int
		wait       bool
		noProgress bool
		db         string
	)
	cmd := &cobra.Command{
		Use:   "submit JOB.yaml [--param k=v]... [--priority N] [--wait]",
		Short: "Create a run in the Postgres ledger for the cluster's workers; print its id",
		Long: `Check the job as precog validate does (spec, model I/O against the source
schema, sinks reachable), plan its shards, and create a pending run in the
Postgres ledger (--db or PRECOG_DATABASE_URL) for the workers of the job's pool.
The run id alone is printed on stdout; logs go to stderr.

A job with a run of the same params still open is refused (exit 2), naming that
run: wait for it, or cancel it.

The run records the spec's YAML before ${ENV} expansion, so secrets never reach
the ledger: workers expand it with their own environment. Relative paths in the
spec resolve against the spec file's directory, which workers must see at the
same absolute path (a shared volume), or use absolute paths and URLs.

--wait follows the run with a progress bar and exits as precog run does: 0
succeeded, 1 failed (with the failed shards' errors), 130 interrupted (the run
keeps going on the workers).`,
		Example: `  precog submit jobs/scores.yaml --param date=2026-11-01
  RUN=$(precog submit jobs/scores.yaml --param date=2026-11-01 --priority 10)
  precog submit jobs/user-recs.yaml --wait --db postgres://precog@db/precog`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			dsn := databaseURL(db)
			if dsn == "" {
				return invalid(fmt.Errorf("submit needs the Postgres ledger: pass --db URL or set %s (precog run runs a job on this machine)", envDatabaseURL))
			}
			spec, err := loadSpec(args[0], params)
			if err != nil {
				return err
			}
			opts := runner.NewRunOptions{}
			if cmd.Flags().Changed("priority") {
				if err := jobs.ValidatePriority(priority); err != nil {
					return invalid(fmt.Errorf("--priority: %w", err))
				}
				opts.Priority = &priority
			}
			if opts.SpecFile, err = filepath.Abs(args[0]); err != nil {
				return invalid(err)
			}
			c, err := runner.CheckJob(ctx, spec)
			if err != nil {
				return err
			}
			defer c.Close()
			led, err := openCluster(ctx, dsn, open.ForCommand(g.log))
			if err != nil {
				return err
			}
			defer led.Close()
			run, shards, err := runner.Submit(ctx, led, spec, c, opts)
			if open := (*ledger.OpenRunError)(nil); errors.As(err, &open) {
				return invalid(open)
			} else if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), run.ID)
			warnNoWorkers(ctx, led, run.Pool, cmd.ErrOrStderr(), g.log)
			g.log.Info("run submitted", "run", run.ID, "pool", run.Pool, "priority", run.Priority,
				"shards", len(shards), "rows", sources.PlannedRows(c.Plans))
			if !wait {
				return nil
			}
			// The run id is submit's result on stdout; the summary goes
			// with the progress, on stderr.
			return waitRun(ctx, g, led, run.ID, !noProgress, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().IntVar(&priority, "priority", 0, fmt.Sprintf("claim priority between runs of the pool, higher first (%d..%d; default: the spec's)", jobs.MinPriority, jobs.MaxPriority))
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the run with a progress bar until it finishes; exit as precog run does")
	cmd.Flags().BoolVar(&noProgress, "no-progress", false, "with --wait: no progress bar, even on a terminal")
	addDBFlag(cmd, &db)
	return cmd
}

// waitRun follows a cluster run with the progress bar of precog run
// (runner.WaitRun) and ends as precog run does: the summary on out when it
// succeeded, an error (exit 1) naming the failed shards when it failed or
// was cancelled, context.Canceled (exit 130) when interrupted: the run
// keeps going on the workers.
func waitRun(ctx context.Context, g *globals, led ledger.RunReader, id string, progress bool, out io.Writer) error {
	if g.interrupts != nil {
		g.interrupts.SetMessage(msgInterruptWait)
	}
	bar := newProgressBar(os.Stderr, progress, g.log)
	v, err := runner.WaitRun(ctx, runner.WaitParams{Ledger: led, RunID: id, OnProgress: bar.update,
		OnError: func(err error) { g.log.Warn("reading the run from the ledger failed; retrying", "run", id, "err", err) }})
	bar.finish()
	if err != nil {
		return err
	}
	return v.WriteSummary(out)
}
