package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/schedule"
)

// LoadScheduled loads the job spec at path for a view (no sink secret
// expanded) with the params a run fired at now gets (date, scheduled_for:
// a spec whose templates need others could never run from a schedule),
// and its schedule; a spec without one is an error naming the field.
// Every error is the spec's (precog schedule next: invalid input).
func LoadScheduled(path string, now time.Time) (*schedule.Schedule, *jobs.Spec, error) {
	spec, err := jobs.LoadForView(path, schedule.Params(now, time.UTC))
	if err != nil {
		return nil, nil, err
	}
	sched, err := schedule.FromSpec(spec)
	if errors.Is(err, schedule.ErrNoSchedule) {
		return nil, nil, fmt.Errorf("%s: schedule: the job has no schedule; add a 5-field cron expression (e.g. schedule: \"0 */4 * * *\")", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return sched, spec, nil
}

// Scheduled is every spec of the directory that has a schedule, in name
// order (LoadForView at now); a spec that does not load is the error,
// the first one by name, and an unreadable directory is named as --jobs
// (as Read names it).
func (d Dir) Scheduled(now time.Time) ([]*jobs.Spec, error) {
	all, errs, err := d.LoadForView(now)
	if err != nil {
		return nil, fmt.Errorf("--jobs: %w", err)
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	var specs []*jobs.Spec
	for _, spec := range all {
		if spec.Schedule != "" {
			specs = append(specs, spec)
		}
	}
	return specs, nil
}

// ListParams are what WriteList prints.
type ListParams struct {
	Specs []*jobs.Spec
	Now   time.Time
	// Runs is the ledger of the jobs' runs; nil: LAST_RUN and STALE
	// print "-".
	Runs RunLister
}

// WriteList writes `precog schedule list`: one line per job with its
// schedule, zone, next fire, catch-up and concurrency policies,
// max_staleness, last scheduled run and staleness (StalenessOf's words,
// the same as the dashboard's jobs page).
func WriteList(ctx context.Context, w io.Writer, p ListParams) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tTIMEZONE\tNEXT\tCATCHUP\tCONCURRENCY\tMAX_STALENESS\tLAST_RUN\tSTALE")
	for _, spec := range p.Specs {
		sched, err := schedule.FromSpec(spec)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.File, err)
		}
		next := "-"
		if t := sched.Next(p.Now); !t.IsZero() {
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
		if p.Runs != nil {
			run, at, ok, err := LastScheduledRun(ctx, p.Runs, spec.Name)
			if err != nil {
				return err
			}
			if ok {
				last = at.In(sched.Location()).Format(time.RFC3339) + " " + string(run.State)
			}
			st, err := StalenessOf(ctx, p.Runs, spec, p.Now)
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
