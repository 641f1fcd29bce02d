package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/runview"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner"
)

// openViews reads runs from the embedded ledger under --state-dir as views.
func openViews(cmd *cobra.Command, g *globals, job string, limit int, id string) ([]runview.Run, error) {
	led, err := bolt.Open(filepath.Join(g.stateDir, "ledger.db"))
	if err != nil {
		return nil, err
	}
	defer led.Close()
	ctx := cmd.Context()
	var runs []runview.Run
	if id != "" {
		r, err := led.Run(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			return nil, invalid(fmt.Errorf("run %s: not found in %s (see precog runs)", id, g.stateDir))
		} else if err != nil {
			return nil, err
		}
		shards, err := led.Shards(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		return []runview.Run{runview.From(r, shards)}, nil
	}
	rs, err := led.Runs(ctx, job, limit)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		shards, err := led.Shards(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		runs = append(runs, runview.From(r, shards))
	}
	return runs, nil
}

func newRunsCmd(g *globals) *cobra.Command {
	var (
		job    string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs, newest first: state, progress, shards, rejects, error",
		Long: `List the runs recorded in the embedded ledger under --state-dir, newest first.

--json prints an array of run objects (id, job, state, rows_done, rows_total,
rejected, shards{pending,running,committed,failed}, scheduled_for, created_at,
finished_at, error), the same shape as precog status RUN --json.`,
		Example: `  precog runs
  precog runs --job user-recs -n 5
  precog runs --json | jq '.[] | select(.state=="failed") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			runs, err := openViews(cmd, g, job, limit, "")
			if err != nil {
				return err
			}
			if asJSON {
				if runs == nil {
					runs = []runview.Run{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(runs)
			}
			return runview.Table(cmd.OutOrStdout(), runs)
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "only this job's runs")
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "at most this many runs (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for machines")
	return cmd
}

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status RUN",
		Short:   "One run's state, progress, shards, rejects and error",
		Example: "  precog status scores-20261101t040000-ab12\n  precog status scores-20261101t040000-ab12 --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			runs, err := openViews(cmd, g, "", 0, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(runs[0])
			}
			return runview.Table(cmd.OutOrStdout(), runs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for machines")
	return cmd
}

func newCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "cancel RUN",
		Aliases: []string{"abandon"},
		Short:   "Abandon an unfinished run and remove what it wrote from every sink",
		Long: `Abandon an unfinished run of the embedded ledger: it is marked cancelled, and
its unpublished data is removed from every sink (its run table, its Redis
version, its Parquet staging directory). Published data is never touched. The
next precog run of the job starts a new run.

A run still executing in another process holds the state directory: stop that
process first (Ctrl-C or SIGTERM drains it).`,
		Example: "  precog runs\n  precog cancel scores-20261101t040000-ab12",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := runner.CancelLocal(cmd.Context(), g.stateDir, args[0], g.log)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				return invalid(fmt.Errorf("run %s: not found in %s (see precog runs)", args[0], g.stateDir))
			case errors.Is(err, runner.ErrNotCancellable):
				return invalid(err)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s\n", r.ID, r.State)
			return nil
		},
	}
}
