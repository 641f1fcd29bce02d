package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
)

func newRejectsCmd(g *globals) *cobra.Command {
	var (
		asJSON, asCSV bool
		limit         int
		db            string
	)
	cmd := &cobra.Command{
		Use:   "rejects RUN [--json|--csv] [--limit N]",
		Short: "Every rejected row of a run, from wherever its shards ran",
		Long: `Every rejected row of a run as the ledger stores it: by shard then position,
each with its shard, key, position (file and row) and reason. Workers store a
shard's rejects in the ledger with the shard's commit, so this lists them
whichever machine ran each shard, after the machines are gone.

The ledger stores up to ` + strconv.Itoa(ledger.DefaultRejectsPerRun) + ` rejected rows per run (precog worker
--max-stored-rejects; the shards committed first fill it); past that rows are still counted (the run's rejected count and
max_rejected_fraction stay exact) but not stored, and this command says how
many of the run's rejects it lists on stderr.

` + ledgerHelp + `

Default output: a header line, then tab-separated lines "key  shard  position
reason" (the reason, free text, last). --csv
prints a header (shard,key,position,reason) and one record per row; --json
prints one array of {shard, key, position, reason}. --limit N stops after N
rows (0: all).`,
		Example: "  precog rejects scores-20261101t040000-ab12 --db postgres://precog@db/precog\n  precog rejects scores-20261101t040000-ab12 --csv > rejects.csv",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON && asCSV {
				return invalid(errors.New("--json and --csv: choose one"))
			}
			if limit < 0 {
				return invalid(errors.New("--limit must be >= 0"))
			}
			ctx := cmd.Context()
			led, err := openLedger(ctx, g, db)
			if err != nil {
				return err
			}
			defer led.Close()
			r, err := led.Run(ctx, args[0])
			if errors.Is(err, ledger.ErrNotFound) {
				return led.notFound(args[0])
			} else if err != nil {
				return err
			}
			format := runview.RejectsText
			if asJSON {
				format = runview.RejectsJSON
			} else if asCSV {
				format = runview.RejectsCSV
			}
			enc := runview.NewRejectEncoder(cmd.OutOrStdout(), format)
			n, stored, _, err := runner.EachReject(ctx, led, r.ID, limit, enc.Encode)
			if err != nil {
				return err
			}
			if err := enc.Close(); err != nil {
				return err
			}
			if note := runner.RejectsShort(n, stored, r.Counts.Rejected, limit); note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), note)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array")
	cmd.Flags().BoolVar(&asCSV, "csv", false, "print CSV with a header")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most N rows (0: all)")
	addDBFlag(cmd, &db)
	return cmd
}
