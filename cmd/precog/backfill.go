package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// backfillFlags are the command line of `precog backfill`.
type backfillFlags struct {
	params        []string
	from, to      string
	step          string
	paramName     string
	parallel      int
	shardParallel int
	noProgress    bool
	force         bool
	db            string
	wait          bool
	dryRun        bool
	priority      int
}

func newBackfillCmd(g *globals) *cobra.Command {
	var f backfillFlags
	cmd := &cobra.Command{
		Use:   "backfill JOB.yaml --from VALUE --to VALUE",
		Short: "Run a job once per date or hour ({{.date}}), each run resumable",
		Long: `Run the job once for every value from --from to --to inclusive, filling the
param named by --param-name (default date) in the spec's templates.

  --step 1d (default): values are dates, YYYY-MM-DD
  --step 1h (or 2h, 6h…): values are hours, YYYY-MM-DDTHH (e.g. 2026-11-01T07)

Before anything runs, every value's spec is loaded and, for a Parquet source,
every partition's path is checked to match files: all the missing ones are
listed in one error (exit 2). A multi-value backfill also refuses sinks whose
publish would replace the previous value's (Postgres mode: replace, Redis
publish: atomic, a Parquet sink path without the param).

--parallel values run at once (default 1), each an ordinary resumable run
recorded in <state-dir>/backfill/<job>/<param>=<value>/. One progress bar
covers the whole range. A failed value does not stop the others: failures are
listed per value at the end and the exit status is 1. The same command after an
interruption skips the values that already succeeded with this exact spec and
model and resumes the interrupted ones. --force recomputes every value.`,
		Example: `  precog backfill jobs/scores.yaml --from 2026-11-01 --to 2026-11-30 --parallel 2
  precog backfill jobs/hourly.yaml --step 1h --from 2026-11-01T00 --to 2026-11-01T23
  precog backfill jobs/events.yaml --param-name dt --from 2026-11-01 --to 2026-11-07`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBackfill(cmd, g, args[0], f)
		},
	}
	cmd.Flags().StringVar(&f.from, "from", "", "first value, YYYY-MM-DD (or YYYY-MM-DDTHH with an hourly --step) (required)")
	cmd.Flags().StringVar(&f.to, "to", "", "last value, inclusive, in the same format (required)")
	cmd.Flags().StringVar(&f.step, "step", "1d", "1d (dates) or Nh (hours, N from 1 to 23)")
	cmd.Flags().StringVar(&f.paramName, "param-name", "date", "the param the values fill ({{.date}}, {{.dt}}…)")
	cmd.Flags().StringArrayVar(&f.params, "param", nil, "other run parameters k=v (repeatable)")
	cmd.Flags().IntVar(&f.parallel, "parallel", 1, "values (dates, hours) run at once")
	cmd.Flags().IntVar(&f.shardParallel, "shard-parallel", 2, "shards processed at once within each run")
	cmd.Flags().BoolVar(&f.noProgress, "no-progress", false, "no progress bar, even on a terminal")
	cmd.Flags().BoolVar(&f.force, "force", false, "recompute values that already succeeded")
	cmd.Flags().BoolVar(&f.wait, "wait", false, "Postgres ledger: follow the backfill until every value ends; exit 1 if one did not succeed")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "list every partition (found or missing, rows and shards from metadata), estimate the wall time and run the backfill's checks (exit 2 where it would refuse the range); run nothing")
	cmd.Flags().IntVar(&f.priority, "priority", 0, "claim priority of the child runs (default: one below the job's priority, below its scheduled refreshes)")
	addDBFlag(cmd, &f.db)
	return cmd
}

func runBackfill(cmd *cobra.Command, g *globals, path string, f backfillFlags) error {
	rg, err := backfill.PlanRange(backfill.RangeRequest{SpecFile: path, Param: f.paramName, From: f.from, To: f.to, Step: f.step,
		Params: f.params, Parallel: f.parallel, ShardParallel: f.shardParallel})
	if err != nil {
		return err
	}
	if f.dryRun {
		return dryRunBackfill(cmd, g, f, rg)
	}
	if rg.Refused != nil {
		return rg.Refused
	}
	values, byValue := rg.Values, rg.Specs()
	ctx := cmd.Context()
	req := rg.Request()
	req.Force = f.force
	if cmd.Flags().Changed("priority") {
		req.Priority = &f.priority
	}
	cluster := databaseURL(f.db) != ""
	if !cluster { // one process runs a job's runs on this machine
		release, err := runner.LockJob(g.stateDir, rg.Partitions[0].Spec.Name)
		if err != nil {
			return err
		}
		defer release()
	}
	ol, err := openLedger(ctx, g, f.db)
	if err != nil {
		return err
	}
	defer ol.Close()
	var led ledger.Store = ol.Store
	out, err := backfill.Ensure(ctx, led, req)
	if err != nil {
		return err
	}
	b := out.Backfill
	fmt.Fprintln(cmd.OutOrStdout(), b.ID)
	g.log.Info("backfill", "id", b.ID, "values", len(values), "new_runs", out.Created, "done_before", out.Skipped, "open", out.Open, "resumed", out.Resumed, "parallel", f.parallel)
	if cluster {
		if !f.wait {
			return nil
		}
		return waitBackfill(ctx, led, b.ID, os.Stderr, !f.noProgress, g)
	}
	g.runningJob()
	// Other processes see the backfill through a snapshot while this one
	// holds the embedded ledger (it follows the ledger's writes itself).
	defer ledger.StartSnapshots(ctx, led, g.log).Stop()
	bar := newProgressBar(os.Stderr, !f.noProgress, g.log)
	start := time.Now()
	vr := backfill.RunLocal(ctx, led, b, byValue, backfill.LocalOptions{StateDir: g.stateDir, Parallel: f.parallel,
		ShardParallel: f.shardParallel, Logger: g.log, OnRangeProgress: bar.update, ProgressEvery: bar.every()})
	bar.finish()
	return reportRange(cmd.ErrOrStderr(), f.paramName, values, vr, time.Since(start))
}

// waitBackfill follows a cluster backfill until every value's run ended
// (backfill.Wait): a bar with the overall rows and ETA, then the table. A
// value that did not succeed is an error (exit 1).
func waitBackfill(ctx context.Context, led backfill.Ledger, id string, w *os.File, progress bool, g *globals) error {
	bar := newProgressBar(w, progress, g.log)
	v, err := backfill.Wait(ctx, led, id, backfill.FollowOptions{OnRead: func(v backfill.View, _ bool) { bar.update(v.Progress()) }})
	bar.finish()
	if jobs.RunState(v.State).Terminal() {
		_ = v.Table(w)
	}
	return err
}

// dryRunBackfill lists every partition (backfill.PlanDryRun) and estimates
// the wall time from a short probe of the model on the first found
// partition's first shard; nothing is recorded. It exits 2 with the
// backfill's own error when the backfill would refuse the range (or every
// partition is missing), after the listing.
func dryRunBackfill(cmd *cobra.Command, g *globals, f backfillFlags, rg backfill.Range) error {
	d := backfill.PlanDryRun(cmd.Context(), rg)
	w := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tPARTITION\tROWS\tSHARDS\n", strings.ToUpper(f.paramName))
	for _, p := range d.List {
		if !p.Found {
			fmt.Fprintf(tw, "%s\tMISSING\t-\t-\t%s\n", p.Value, p.Error)
		} else {
			fmt.Fprintf(tw, "%s\tfound\t%d\t%d\n", p.Value, p.Rows, p.Shards)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d partitions, %d missing, %d rows\n", len(d.List), d.Missing, d.Rows)
	if d.Probe != nil {
		if err := backfill.WriteEstimate(cmd.Context(), w, d.EstimateParams(f.parallel, g.stateDir)); err != nil {
			return err
		}
	}
	if d.Refused == nil {
		g.log.Debug("dry run: the backfill would accept this range", "values", len(rg.Values))
	}
	return d.Refused
}

// reportRange prints one line per value (backfill.Summarize) and returns
// the error the command ends with: interrupted (exit 130), some values
// failed or cancelled (1), or nil.
func reportRange(w io.Writer, name string, values []string, results []backfill.ValueResult, took time.Duration) error {
	lines, err := backfill.Summarize(name, values, results, time.Now())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range lines {
		if l.Detail != "" {
			l.Status += "\t" + l.Detail
		}
		fmt.Fprintf(tw, "%s\t%s\n", l.Value, l.Status)
	}
	tw.Flush()
	if err == nil {
		fmt.Fprintf(w, "backfill of %d values done in %s\n", len(values), took.Round(time.Millisecond))
	}
	return err
}
