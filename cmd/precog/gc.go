package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
)

func newGCCmd(g *globals) *cobra.Command {
	var (
		params []string
		dryRun bool
		asJSON bool
		db     string
	)
	cmd := &cobra.Command{
		Use:   "gc JOB.yaml [--param k=v]... [--dry-run]",
		Short: "Remove orphan run tables, Redis versions and staging directories that no run owns",
		Long: `Remove what killed or failed runs left in the job's sinks: Postgres run and
staging tables, Redis versions and Parquet staging directories whose version is
neither published (current, or retained for rollback) nor owned by an open run
of the ledger. Only what precog created for this job is listed; a user's files,
tables and keys are never touched.

Each sink is cleaned under its writer lock, so gc never races a running job; a
sink being written is skipped, naming the writer (exit 75). The ledger must be
the one the job's runs use: the embedded one under --state-dir, or the Postgres
ledger of --db (env PRECOG_DATABASE_URL).

--dry-run lists what would be removed and changes nothing. --json prints the
report as one object (job, runs, open_runs, dry_run, entries[{sink, version,
what, action, reason, run_id, run_state}]).`,
		Example: `  precog gc jobs/user-recs.yaml --param date=2026-11-01 --dry-run
  precog gc jobs/user-recs.yaml --param date=2026-11-01
  precog gc jobs/scores.yaml --db postgres://precog@db/precog --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			spec, err := loadSpec(args[0], params)
			if err != nil {
				return err
			}
			led, err := openGCLedger(cmd, g, db, dryRun)
			if err != nil {
				return err
			}
			defer led.Close()
			rep, err := runner.GC(ctx, spec, led, runner.GCOptions{DryRun: dryRun})
			w := cmd.OutOrStdout()
			if asJSON {
				if jerr := json.NewEncoder(w).Encode(rep); jerr != nil {
					return errors.Join(err, jerr)
				}
				return err
			}
			printGC(w, rep)
			return err
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	addDBFlag(cmd, &db)
	return cmd
}

// openGCLedger opens the Postgres ledger of db, else the embedded one. A
// missing embedded ledger most likely means a wrong --state-dir: without
// it gc cannot tell an open run's data from an orphan, so only a dry run
// goes on (with a warning).
func openGCLedger(cmd *cobra.Command, g *globals, db string, dryRun bool) (ledger.Store, error) {
	loc, opts := open.Location{StateDir: g.stateDir, DSN: databaseURL(db)}, open.ForCommand(g.log)
	opts.Existing = true
	l, err := openStore(cmd.Context(), loc, opts)
	if !errors.Is(err, open.ErrNoLedger) {
		return l, err
	}
	if !dryRun {
		return nil, invalid(fmt.Errorf("%w: gc needs the ledger of the job's runs to keep an open run's data; pass the --state-dir (or --db) the runs use", err))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v: no run is known, so every unpublished version is listed\n", err)
	return open.Open(cmd.Context(), loc, open.Options{})
}

// printGC writes the report as a table and a summary line.
func printGC(w io.Writer, rep runner.GCReport) {
	fmt.Fprintf(w, "job %s: %d runs in the ledger, %d open\n", rep.Job, rep.Runs, rep.OpenRuns)
	if len(rep.Entries) == 0 {
		fmt.Fprintln(w, "the sinks hold no data of this job")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SINK\tVERSION\tACTION\tWHAT")
	counts := map[string]int{}
	for _, e := range rep.Entries {
		action := e.Action
		if e.Reason != "" {
			action += ": " + e.Reason
		}
		counts[e.Action]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Sink, e.Version, action, e.What)
	}
	tw.Flush()
	switch {
	case rep.DryRun && counts[runner.GCWouldRemove] > 0:
		fmt.Fprintf(w, "%d would be removed; run again without --dry-run to remove them\n", counts[runner.GCWouldRemove])
	case rep.DryRun:
		fmt.Fprintln(w, "nothing to remove")
	default:
		fmt.Fprintf(w, "%d removed, %d kept, %d skipped, %d failed\n",
			counts[runner.GCRemoved], counts[runner.GCKept], counts[runner.GCSkipped], counts[runner.GCFailed])
	}
}
