package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// ledgerHelp says which ledger runs/status/cancel/retry read.
const ledgerHelp = `With --db URL or PRECOG_DATABASE_URL they read the Postgres ledger of the
cluster; without, the embedded ledger under --state-dir.`

// loadRun reads one run and its shards, a clear invalid error when unknown.
func loadRun(ctx context.Context, led *openedLedger, id string) (jobs.Run, []jobs.Shard, error) {
	r, err := led.Run(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return r, nil, led.notFound(id)
	} else if err != nil {
		return r, nil, err
	}
	shards, err := led.Shards(ctx, r.ID)
	return r, shards, err
}

func newRunsCmd(g *globals) *cobra.Command {
	var (
		job    string
		bfID   string
		limit  int
		asJSON bool
		db     string
	)
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs, newest first: state, progress, rate, duration, shards, rejects, error",
		Long: `List runs, newest first. ` + ledgerHelp + `

--json prints an array of run objects (id, job, state, rows_done, rows_total,
rejected, shards{pending,running,committed,failed}, scheduled_for, created_at,
finished_at, error, rows_per_s, duration_s), the same shape as precog status
RUN --json.`,
		Example: `  precog runs
  precog runs --job user-recs -n 5
  precog runs --db postgres://precog@db/precog
  precog runs --json | jq '.[] | select(.state=="failed") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			led, err := openLedger(ctx, g, db)
			if snap, ok := snapshotFallback(g, db, err, cmd.ErrOrStderr()); ok {
				return printSnapshotRuns(cmd, snap, job, bfID, limit, asJSON)
			} else if err != nil {
				return err
			}
			defer led.Close()
			var rs []jobs.Run
			if bfID != "" {
				rs, err = backfillRuns(ctx, led, bfID)
			} else {
				rs, err = led.Runs(ctx, job, limit)
			}
			if err != nil {
				return err
			}
			runs, err := runner.RunViews(ctx, led.Store, led.stateDir(g), rs, time.Now())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(runs)
			}
			return runview.Table(cmd.OutOrStdout(), runs)
		},
	}
	cmd.Flags().StringVar(&bfID, "backfill", "", "only this backfill's runs (every value's, retries included)")
	cmd.Flags().StringVar(&job, "job", "", "only this job's runs")
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "at most this many runs (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for machines")
	addDBFlag(cmd, &db)
	return cmd
}

func newStatusCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		watch  bool
		db     string
	)
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "One run's state, progress, rate and ETA, shards, workers, errors",
		Long: `One run: state, progress with rate and ETA, shards by state, the workers
holding shards with their heartbeat ages (a lost holder's leases are
expiring), a sample of rejected rows (shard, file and row, reason, key; precog
rejects RUN lists every one the ledger stores), the failed shards' errors and
the run's error. ` + ledgerHelp + `

--json prints the run object of precog runs --json plus "reject_sample": an
array of {shard, key, position, reason}, by shard then position.

--watch (Postgres ledger) redraws every second until the run finishes, then
exits 0 if it succeeded and 1 if it failed or was cancelled; on a terminal it
redraws in place, elsewhere it prints one line per change. With --json it
prints one object per change. A backfill is watched the same way until every
value is done, on either ledger; on the embedded ledger the watch ends (exit
1) when no precog process is running the unfinished backfill.`,
		Example: "  precog status scores-20261101t040000-ab12\n  precog status scores-20261101t040000-ab12 --json\n  precog status scores-20261101t040000-ab12 --watch --db postgres://precog@db/precog",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if watch && databaseURL(db) == "" {
				read := backfill.LocalReader(g.stateDir, args[0])
				if _, found, _, err := read(ctx); err == nil && found {
					return watchBackfill(ctx, read, args[0], cmd.OutOrStdout(), asJSON)
				}
			}
			led, err := openLedger(ctx, g, db)
			if snap, ok := snapshotFallback(g, db, err, cmd.ErrOrStderr()); ok {
				return printSnapshotStatus(snap, args[0], cmd.OutOrStdout(), asJSON)
			} else if err != nil {
				return err
			}
			defer led.Close()
			if bl, _, ok, err := backfill.Find(ctx, led.Store, args[0]); err != nil {
				return err
			} else if ok && watch {
				return watchBackfill(ctx, backfill.ClusterReader(bl, args[0]), args[0], cmd.OutOrStdout(), asJSON)
			} else if ok {
				return printBackfillStatus(ctx, bl, args[0], cmd.OutOrStdout(), asJSON)
			}
			if watch && led.cluster == nil {
				return invalid(errors.New("--watch follows runs of the Postgres ledger (--db or PRECOG_DATABASE_URL); precog run shows its own progress"))
			}
			r, shards, err := loadRun(ctx, led, args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if watch {
				return runner.WatchRun(ctx, runner.WatchParams{Ledger: led, RunID: r.ID, Out: w, Format: watchFormat(w, asJSON)})
			}
			ws, err := led.ListWorkers(ctx, "")
			if err != nil {
				g.log.Warn("list workers for their heartbeats", "err", err)
			}
			sr, err := runner.RunStatus(ctx, runner.StatusParams{Ledger: led.Store, StateDir: led.stateDir(g), Run: r, Shards: shards, Workers: ws, Now: time.Now()})
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(w).Encode(sr.Status)
			}
			return sr.WriteText(w)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for machines")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every second until the run finishes")
	addDBFlag(cmd, &db)
	return cmd
}

// watchFormat is how status --watch shows a run on w: JSON objects, a
// redrawn view on a terminal, else lines.
func watchFormat(w io.Writer, asJSON bool) runner.WatchFormat {
	if asJSON {
		return runner.WatchJSON
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return runner.WatchRedraw
	}
	return runner.WatchLines
}

func newCancelCmd(g *globals) *cobra.Command {
	var (
		db            string
		force         bool
		drain         time.Duration
		scanUnindexed bool
	)
	cmd := &cobra.Command{
		Use:     "cancel RUN",
		Aliases: []string{"abandon"},
		Short:   "Stop an unfinished run and remove what it wrote from every sink",
		Long: `Stop an unfinished run: it is marked cancelled, and its unpublished data is
removed from every sink (its run table, its Redis version, its Parquet staging
directory). Published data is never touched. The next run of the job starts a
new run.

Postgres ledger (--db or PRECOG_DATABASE_URL): workers holding its shards stop
within seconds; cancel waits for their leases to end (at most --drain) before
it cleans the sinks, with the spec the run recorded and this environment's
${ENV} values. Cancelling an already cancelled run cleans its sinks again. A
run that is publishing is refused: its publish finishes in moments (another
worker takes over one whose worker died), and a cancel between two sinks
would leave them on different versions. The run's open shards end with the
cancel (status shows none running); cancel returns as soon as the last
worker holding one has stopped.

Embedded ledger: a run still executing in another process holds the state
directory: stop that process first (Ctrl-C or SIGTERM drains it).

When this process lacks the sinks' environment (a ${VAR} of the spec is
unset here) or a sink is down, the run is still cancelled and cancel says
"cancelled; sink cleanup pending: …". On the Postgres ledger the pending
cleanup is recorded and a worker of the run's pool finishes it (exit 0); on
the embedded ledger run precog cancel RUN again where the environment is set
(exit 1 until then).

Cost: each sink deletes what the run wrote and nothing else is read. Redis
keeps a record of the keys each version wrote ({ns}:keys:{version}), so a
cancel UNLINKs exactly those keys in batches, and a run that wrote nothing
costs one round trip; the keyspace is never scanned. A version written by
a precog older than key records (before 2026-11-23) has no record: it is
left to its TTL unless --scan-unindexed asks for a SCAN of the whole
keyspace.`,
		Example: "  precog runs\n  precog cancel scores-20261101t040000-ab12\n  precog cancel scores-20261101t040000-ab12 --db postgres://precog@db/precog",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			co := cancelOptions{drain: drain, scanUnindexed: scanUnindexed, out: cmd.OutOrStdout(), log: g.log}
			if done, err := cancelIfBackfill(cmd.Context(), g, db, args[0], co); done {
				return err
			}
			if held, err := cancelHeld(cmd.Context(), g, db, args[0], cmd.OutOrStdout()); held {
				return err
			}
			if dsn := databaseURL(db); dsn != "" {
				led, err := openLedger(cmd.Context(), g, db)
				if err != nil {
					return err
				}
				defer led.Close()
				return cancelCluster(cmd.Context(), led, args[0], co)
			}
			res, err := runner.CancelLocal(cmd.Context(), g.stateDir, args[0], runner.CancelOptions{ScanUnindexed: scanUnindexed, Log: g.log})
			switch {
			case errors.Is(err, ledger.ErrPublishing):
				return invalid(fmt.Errorf("run %s is publishing (its results are being made visible in every sink): cancelling now could leave the sinks on different versions; it finishes in moments: %w", args[0], err))
			case errors.Is(err, ledger.ErrNotFound):
				return invalid(fmt.Errorf("run %s: not found in %s (see precog runs)", args[0], g.stateDir))
			case errors.Is(err, runner.ErrNotCancellable):
				return invalid(err)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s\n", res.Run.ID, res.Run.State)
			res.WriteCleaned(cmd.OutOrStdout())
			return nil
		},
	}
	addDBFlag(cmd, &db)
	cmd.Flags().BoolVar(&force, "force", false, "no effect: a run that is publishing is never cancelled")
	_ = cmd.Flags().MarkDeprecated("force", "a run that is publishing is never cancelled (the sinks would disagree); wait for its publish to finish")
	cmd.Flags().DurationVar(&drain, "drain", time.Minute, "Postgres ledger: wait at most this long for workers to let go of the run's shards")
	cmd.Flags().BoolVar(&scanUnindexed, "scan-unindexed", false, "Redis: delete a version written by a precog older than key records (2026-11-23) with a SCAN of the whole keyspace; without it such a version is left to its TTL")
	return cmd
}

func newRetryCmd(g *globals) *cobra.Command {
	var (
		db         string
		wait       bool
		noProgress bool
		force      bool
		parallel   int
	)
	cmd := &cobra.Command{
		Use:   "retry RUN",
		Short: "Rerun a run's failed shards (its committed shards are kept)",
		Long: `Rerun the failed shards of a run; its committed shards are kept.

Postgres ledger (--db or PRECOG_DATABASE_URL): the failed shards go back to
pending and the pool's workers pick them up; --wait follows the run as submit
--wait does.

Embedded ledger: the run is resumed on this machine with the spec it recorded
(expanded with this environment), as precog run with its params would: failed
shards are retried, the rest of the run executed and published.`,
		Example: "  precog retry scores-20261101t040000-ab12\n  precog retry scores-20261101t040000-ab12 --db postgres://precog@db/precog --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			led, err := openLedger(ctx, g, db)
			if err != nil {
				return err
			}
			if bl, b, ok, err := backfill.Find(ctx, led.Store, args[0]); err != nil {
				led.Close()
				return err
			} else if ok {
				defer led.Close()
				return retryBackfill(ctx, g, led, bl, b, parallel, cmd.OutOrStdout())
			}
			defer led.Close()
			r, _, err := loadRun(ctx, led, args[0])
			if err != nil {
				return err
			}
			p := runner.RetryParams{Ledger: led.Store, Run: r, Cluster: led.cluster != nil, Force: force}
			var bar *progressBar
			if !p.Cluster {
				g.runningJob()
				bar = newProgressBar(os.Stderr, !noProgress, g.log)
				p.Resume = &runner.LocalOptions{StateDir: g.stateDir, Parallel: parallel, Logger: g.log, OnProgress: bar.update, ProgressEvery: bar.every()}
			}
			res, err := runner.Retry(ctx, p)
			switch {
			case bar != nil:
				bar.finish()
				if err == nil {
					res.Resumed.WriteSummary(cmd.OutOrStdout())
				}
				return err
			case err != nil:
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			if !wait {
				return nil
			}
			return waitRun(ctx, g, led, r.ID, !noProgress, cmd.OutOrStdout())
		},
	}
	addDBFlag(cmd, &db)
	cmd.Flags().BoolVar(&wait, "wait", false, "Postgres ledger: follow the run until it finishes; exit as precog run does")
	cmd.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar, even on a terminal")
	cmd.Flags().IntVar(&parallel, "parallel", 2, "embedded ledger: shards processed at once")
	cmd.Flags().BoolVar(&force, "force", false, "retry even when a newer run of the same job and params succeeded (its publish is still refused where that run's version is published)")
	return cmd
}
