package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/scheduler"
)

// maxScheduleNext bounds `schedule next -n`.
const maxScheduleNext = 10_000

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Check job schedules: next fire times, every job's schedule",
	}
	cmd.AddCommand(newScheduleNextCmd(), newScheduleListCmd(g))
	// Wrong arguments are invalid input (exit 2), as for top-level commands.
	for _, c := range cmd.Commands() {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error { return invalid(args(cmd, a)) }
		}
	}
	return cmd
}

func newScheduleNextCmd() *cobra.Command {
	var (
		from string
		n    int
	)
	cmd := &cobra.Command{
		Use:   "next JOB.yaml [--from T] [-n N]",
		Short: "Print the next fire times of a job, one RFC 3339 timestamp (in the job's zone) per line",
		Long: `Print the next N fire times of the job's schedule after --from (default: now),
one RFC 3339 timestamp with the zone's offset per line, in the job's timezone.

Across daylight-saving changes: a time skipped by a spring-forward change fires
once, at the first instant after it; a time repeated by a fall-back change fires
once, at its first occurrence, except for expressions whose hour field is *
(every hour or more often), which follow elapsed time and fire in both.`,
		Example: `  precog schedule next jobs/user-recs.yaml
  precog schedule next jobs/user-recs.yaml --from 2026-11-01T00:00:00-04:00 -n 5`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			after := time.Now()
			if from != "" {
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					return invalid(fmt.Errorf("--from %q: not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z): %w", from, err))
				}
				after = t
			}
			if n < 1 || n > maxScheduleNext {
				return invalid(fmt.Errorf("-n: must be between 1 and %d (got %d)", maxScheduleNext, n))
			}
			sched, _, err := scheduler.LoadScheduled(args[0], time.Now())
			if err != nil {
				return invalid(err)
			}
			w := cmd.OutOrStdout()
			for t, i := after, 0; i < n; i++ {
				if t = sched.Next(t); t.IsZero() {
					break
				}
				fmt.Fprintln(w, t.Format(time.RFC3339))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "list fire times after this RFC 3339 time (default now)")
	cmd.Flags().IntVarP(&n, "n", "n", 10, "how many fire times")
	return cmd
}

// scheduleLedger opens the ledger `schedule list` reads each job's last
// run and staleness from: the Postgres ledger of --db or
// PRECOG_DATABASE_URL, else the embedded one under --state-dir when it
// exists and is free (an embedded scheduler holds it: then the columns
// print "-"). nil when none.
func scheduleLedger(g *globals, db string) (ledger.Ledger, func(), error) {
	loc, opts := open.Location{StateDir: g.stateDir, DSN: databaseURL(db)}, open.ForCommand(g.log)
	opts.Existing = true
	l, err := openStore(context.Background(), loc, opts)
	switch {
	case err == nil:
		return l, func() { l.Close() }, nil
	case loc.Postgres():
		return nil, nil, err
	case !errors.Is(err, open.ErrNoLedger):
		g.log.Warn("last runs unavailable", "err", err)
	}
	return nil, func() {}, nil
}

func newScheduleListCmd(g *globals) *cobra.Command {
	var dir, db string
	cmd := &cobra.Command{
		Use:   "list --jobs DIR [--db URL]",
		Short: "List every scheduled job of a directory: schedule, zone, next fire, catch-up policy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return invalid(errors.New("--jobs: required (the directory of job specs)"))
			}
			specs, err := scheduler.Dir{Path: dir}.Scheduled(time.Now())
			if err != nil {
				return invalid(err)
			}
			led, done, err := scheduleLedger(g, db)
			if err != nil {
				return err
			}
			defer done()
			var runs scheduler.RunLister // a nil ledger stays a nil interface
			if led != nil {
				runs = led
			}
			return scheduler.WriteList(cmd.Context(), cmd.OutOrStdout(), scheduler.ListParams{Specs: specs, Now: time.Now(), Runs: runs})
		},
	}
	cmd.Flags().StringVar(&dir, "jobs", "", "directory of job specs (*.yaml, *.yml)")
	addDBFlag(cmd, &db)
	return cmd
}
