package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
)

func newRollbackCmd(g *globals) *cobra.Command {
	var (
		params    []string
		to        string
		list      bool
		db        string
		onlySinks []string
	)
	cmd := &cobra.Command{
		Use:   "rollback JOB.yaml [--to VERSION] [--sinks redis,postgres]",
		Short: "Point readers back at an earlier published version in every sink (Redis current, Postgres view, Parquet directory)",
		Long: `Move what readers see back to a retained published version, in one step per
store: Redis's {namespace}:current and the Postgres view are switched, and the
Parquet target directory is swapped with the retained copy of that version
(kept beside it in .<dir>.precog.versions/). The data of both versions stays
until retention (each sink's retain, default 2) removes it.

Without --to, rolls back to the newest retained version older than the current
one. Every store is checked to hold the target before any is changed: a sink
that no longer retains it, or keeps no earlier versions at all (Postgres
mode: upsert, Redis publish: in_place), makes rollback refuse with exit 2,
naming the sink, and nothing changes. --sinks names the sinks to move when
you accept leaving the others where they are (the stores then serve
different versions until the next run publishes). Rollback holds every
store's writer lock while it switches, and is refused while a run of the
job (same params) is publishing: in the Postgres ledger (--db or
PRECOG_DATABASE_URL) when one is named, else in the state directory's.`,
		Example: `  precog rollback jobs/user-recs.yaml --list
  precog rollback jobs/user-recs.yaml
  precog rollback jobs/user-recs.yaml --to 20261121t080000-3f9a
  precog rollback jobs/user-recs.yaml --sinks redis,postgres`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := loadSpec(args[0], params)
			if err != nil {
				return err
			}
			res, err := runner.Rollback(cmd.Context(), runner.RollbackParams{Spec: spec, To: to, Only: onlySinks, List: list,
				OpenLedger: func(ctx context.Context) (ledger.Ledger, error) { return publishingLedger(ctx, g, db) }})
			printRollback(cmd.OutOrStdout(), res, list && err == nil)
			return err
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().StringVar(&to, "to", "", "version to roll back to (default: the one before the current)")
	cmd.Flags().BoolVar(&list, "list", false, "only list the current and retained versions of each store")
	cmd.Flags().StringSliceVar(&onlySinks, "sinks", nil, "move only these sinks (comma-separated: parquet, postgres, redis), leaving the others on their version")
	addDBFlag(cmd, &db)
	return cmd
}

// printRollback says what a rollback saw and did: the sinks left out,
// then (list: --list, and every store read) each store's versions, or
// each move.
func printRollback(w io.Writer, res runner.RollbackResult, list bool) {
	for _, st := range res.Stores {
		switch st.Skipped {
		case runner.SkipNotNamed:
			fmt.Fprintf(w, "%s: left as it is (not in --sinks)\n", st.Name)
		case runner.SkipNoVersions:
			fmt.Fprintf(w, "%s: keeps no earlier versions\n", st.Name)
		}
	}
	if list {
		for _, st := range res.Stores {
			if st.Skipped == "" {
				fmt.Fprintf(w, "%s: current %s; retained (newest first): %s\n", st.Name, runner.OrNone(st.Current), runner.OrNone(strings.Join(st.Versions, ", ")))
			}
		}
		return
	}
	for _, st := range res.Moved {
		fmt.Fprintf(w, "%s: %s → %s\n", st.Name, runner.OrNone(st.Current), res.Target)
	}
	for _, st := range res.MovedBack {
		fmt.Fprintf(w, "%s: moved back to %s\n", st.Name, st.Current)
	}
}

// publishingLedger opens the ledger a rollback asks whether a run of the
// job is publishing: the Postgres ledger when one is named, else the state
// directory's; none when nothing ran here or a running precog run holds it
// (that process holds the stores' writer locks while it publishes).
func publishingLedger(ctx context.Context, g *globals, db string) (ledger.Ledger, error) {
	loc, opts := open.Location{StateDir: g.stateDir, DSN: databaseURL(db)}, open.ForCommand(g.log)
	opts.Existing = true
	l, err := openStore(ctx, loc, opts)
	if !loc.Postgres() && (errors.Is(err, open.ErrNoLedger) || errors.Is(err, ledger.ErrBusy)) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return l, nil
}
