package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/schedule"
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
			sched, _, err := loadSchedule(args[0])
			if err != nil {
				return err
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

// loadScheduledSpec loads a job spec with the params a scheduled run gets
// (date and scheduled_for, here of the current time): a spec whose
// templates need others could never run from a schedule.
func loadScheduledSpec(path string) (*jobs.Spec, error) {
	// A view: it needs none of the sinks' secrets (jobs.LoadForView).
	spec, err := jobs.LoadForView(path, schedule.Params(time.Now(), time.UTC))
	if err != nil {
		return nil, invalid(err)
	}
	return spec, nil
}

// loadSchedule loads a job spec and its schedule; a spec without one is
// invalid input naming the field.
func loadSchedule(path string) (*schedule.Schedule, *jobs.Spec, error) {
	spec, err := loadScheduledSpec(path)
	if err != nil {
		return nil, nil, err
	}
	sched, err := schedule.FromSpec(spec)
	if errors.Is(err, schedule.ErrNoSchedule) {
		return nil, nil, invalid(fmt.Errorf("%s: schedule: the job has no schedule; add a 5-field cron expression (e.g. schedule: \"0 */4 * * *\")", path))
	}
	if err != nil {
		return nil, nil, invalid(fmt.Errorf("%s: %w", path, err))
	}
	return sched, spec, nil
}

// scheduleLedger opens the ledger `schedule list` reads each job's last
// run and staleness from: the Postgres ledger of --db or
// PRECOG_DATABASE_URL, else the embedded one under --state-dir when it
// exists and is free (an embedded scheduler holds it: then the columns
// print "-"). nil when none.
func scheduleLedger(g *globals, db string) (ledger.Ledger, func(), error) {
	if dsn := databaseURL(db); dsn != "" {
		l, err := openCluster(context.Background(), dsn, cliLedgerOptions(g.log))
		if err != nil {
			return nil, nil, err
		}
		return l, func() { l.Close() }, nil
	}
	l, err := open.Open(context.Background(), open.Location{StateDir: g.stateDir}, open.Options{Existing: true})
	if errors.Is(err, open.ErrNoLedger) {
		return nil, func() {}, nil
	}
	if err != nil {
		g.log.Warn("last runs unavailable", "err", err)
		return nil, func() {}, nil
	}
	return l, func() { l.Close() }, nil
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
			specs, err := loadScheduledSpecs(dir)
			if err != nil {
				return err
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
			return writeScheduleList(cmd.Context(), cmd.OutOrStdout(), specs, time.Now(), runs)
		},
	}
	cmd.Flags().StringVar(&dir, "jobs", "", "directory of job specs (*.yaml, *.yml)")
	addDBFlag(cmd, &db)
	return cmd
}

// loadScheduledSpecs loads every spec of dir, in name order; specs without
// a schedule are left out.
func loadScheduledSpecs(dir string) ([]*jobs.Spec, error) {
	all, errs, err := scheduler.Dir{Path: dir}.LoadForView(time.Now())
	if err != nil {
		return nil, invalid(fmt.Errorf("--jobs: %w", err))
	}
	if len(errs) > 0 {
		return nil, invalid(errs[0])
	}
	var specs []*jobs.Spec
	for _, spec := range all {
		if spec.Schedule != "" {
			specs = append(specs, spec)
		}
	}
	return specs, nil
}

// writeScheduleList prints one line per job; led may be nil (no ledger:
// LAST_RUN and STALE print "-"). STALE is scheduler.StalenessOf's, the
// same words as the dashboard's jobs page.
func writeScheduleList(ctx context.Context, w io.Writer, specs []*jobs.Spec, now time.Time, led scheduler.RunLister) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tTIMEZONE\tNEXT\tCATCHUP\tCONCURRENCY\tMAX_STALENESS\tLAST_RUN\tSTALE")
	for _, spec := range specs {
		sched, err := schedule.FromSpec(spec)
		if err != nil {
			return invalid(fmt.Errorf("%s: %w", spec.File, err))
		}
		next := "-"
		if t := sched.Next(now); !t.IsZero() {
			next = t.Format(time.RFC3339)
		}
		catchup := string(spec.Catchup)
		if spec.Catchup == jobs.CatchupAll {
			catchup += " (max " + strconv.Itoa(int(spec.MaxCatchup)) + ")"
		}
		staleness := "-"
		if d := spec.MaxStaleness.Duration; d > 0 {
			staleness = d.String()
		}
		last, stale := "-", "-"
		if led != nil {
			run, at, ok, err := scheduler.LastScheduledRun(ctx, led, spec.Name)
			if err != nil {
				return err
			}
			if ok {
				last = at.In(sched.Location()).Format(time.RFC3339) + " " + string(run.State)
			}
			st, err := scheduler.StalenessOf(ctx, led, spec, now)
			if err != nil {
				return err
			}
			stale = st.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", spec.Name, spec.Schedule, spec.Timezone, next,
			catchup, spec.Concurrency, staleness, last, stale)
	}
	return tw.Flush()
}
