package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/runner"
)

func newBackfillCmd(g *globals) *cobra.Command {
	var (
		params     []string
		from, to   string
		parallel   int
		noProgress bool
		force      bool
	)
	cmd := &cobra.Command{
		Use:   "backfill JOB.yaml --from YYYY-MM-DD --to YYYY-MM-DD",
		Short: "Run a job once per date ({{.date}}), oldest first, each run resumable",
		Long: `Run the job once for every date from --from to --to inclusive, oldest first,
filling {{.date}} in the spec. Each date is an ordinary run in the embedded
ledger, so the same command after an interruption skips the dates that already
succeeded with this exact spec and model, resumes the interrupted date from its
committed shards, and goes on. --force recomputes every date. Stops at the
first date that fails and says which.`,
		Example: `  precog backfill jobs/scores.yaml --from 2026-11-01 --to 2026-11-30`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dates, err := dateRange(from, to)
			if err != nil {
				return invalid(err)
			}
			if parallel < 1 {
				return invalid(fmt.Errorf("--parallel: must be >= 1 (got %d)", parallel))
			}
			for _, p := range params {
				if len(p) >= 5 && p[:5] == "date=" {
					return invalid(fmt.Errorf("--param date: set by backfill from --from/--to"))
				}
			}
			// Check the whole range before running anything.
			for _, d := range dates {
				spec, err := loadSpec(args[0], append(slices.Clone(params), "date="+d))
				if err != nil {
					return err
				}
				if !slices.Contains(spec.TemplateParams(), "date") {
					return invalid(fmt.Errorf("%s: backfill needs a spec that uses {{.date}} (it uses: %v)", args[0], spec.TemplateParams()))
				}
			}
			w := cmd.OutOrStdout()
			start := time.Now()
			for i, d := range dates {
				spec, err := loadSpec(args[0], append(slices.Clone(params), "date="+d))
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "[%d/%d] date=%s\n", i+1, len(dates), d)
				bar := newProgressBar(os.Stderr, !noProgress, g.log)
				res, err := runner.RunLocal(cmd.Context(), spec, runner.LocalOptions{
					StateDir: g.stateDir, Parallel: parallel, Logger: g.log, SkipSucceeded: !force,
					OnProgress: bar.update, ProgressEvery: bar.every(),
				})
				bar.finish()
				if err != nil {
					return fmt.Errorf("backfill stopped at date=%s (%d of %d dates done): %w", d, i, len(dates), err)
				}
				if res.AlreadyDone {
					fmt.Fprintf(w, "  already done: run %s succeeded with this spec and model (--force recomputes)\n", res.Run.ID)
					continue
				}
				printSummary(cmd, res)
			}
			fmt.Fprintf(w, "backfill of %d dates done in %s\n", len(dates), time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first date, YYYY-MM-DD (required)")
	cmd.Flags().StringVar(&to, "to", "", "last date, YYYY-MM-DD, inclusive (required)")
	cmd.Flags().StringArrayVar(&params, "param", nil, "other run parameters k=v (repeatable)")
	cmd.Flags().IntVar(&parallel, "parallel", 2, "shards processed at once within a date")
	cmd.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar, even on a terminal")
	cmd.Flags().BoolVar(&force, "force", false, "recompute dates that already succeeded")
	return cmd
}

// maxBackfillDates bounds a range typed by mistake (--to 2062-…).
const maxBackfillDates = 3660

func dateRange(from, to string) ([]string, error) {
	if from == "" || to == "" {
		return nil, fmt.Errorf("--from and --to are required (YYYY-MM-DD)")
	}
	f, err := time.Parse(time.DateOnly, from)
	if err != nil {
		return nil, fmt.Errorf("--from %q: want YYYY-MM-DD", from)
	}
	t, err := time.Parse(time.DateOnly, to)
	if err != nil {
		return nil, fmt.Errorf("--to %q: want YYYY-MM-DD", to)
	}
	if t.Before(f) {
		return nil, fmt.Errorf("--to %s is before --from %s", to, from)
	}
	var out []string
	for d := f; !d.After(t); d = d.AddDate(0, 0, 1) {
		if len(out) == maxBackfillDates {
			return nil, fmt.Errorf("--from %s --to %s: more than %d dates", from, to, maxBackfillDates)
		}
		out = append(out, d.Format(time.DateOnly))
	}
	return out, nil
}
