package dashboard

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/schedule"
	"github.com/precog-ml/precog/jobs/scheduler"
)

// nextFires is how many next fire times /jobs lists; sparkRuns how many
// recent runs its sparkline covers.
const (
	nextFires = 3
	sparkRuns = 20
)

// jobRow is one job as /jobs shows it: a spec of --jobs, or a job the
// ledger knows from its runs (with the spec its newest run recorded).
type jobRow struct {
	Name, File string
	// FromRun is the run whose recorded spec the row shows ("" when the
	// spec came from --jobs, or no spec could be read).
	FromRun        string
	NoSpec         bool
	Cron, Words    string
	Zone           string
	Next           []time.Time
	MaxStaleness   string
	LastRun        *runRow
	LastSuccess    time.Time
	Staleness      string
	Stale          bool
	Spark          template.HTML
	ScheduleErrors string
}

// jobsPage lists the specs of --jobs first, then every other job the
// ledger has runs of, each with the schedule of the spec its newest run
// recorded.
func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request, v viewer) {
	var (
		specs    []*jobs.Spec
		loadErrs []error
	)
	if s.opts.JobsDir != "" {
		specs, loadErrs = loadViewSpecs(s.opts.JobsDir, s.opts.Now())
	}
	s.withLedger(w, r, v, func(led ledger.Store) error {
		ctx := r.Context()
		now := s.opts.Now()
		names, err := led.JobNames(ctx)
		if err != nil {
			return fmt.Errorf("jobs of the ledger: %w", err)
		}
		have := map[string]bool{}
		var rows []jobRow
		for _, spec := range specs {
			have[spec.Name] = true
			row, err := jobOf(ctx, led, s.view, spec, now)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		for _, name := range names {
			if have[name] {
				continue
			}
			spec, fromRun, err := recordedSpec(ctx, led, name)
			if err != nil {
				return err
			}
			row, err := jobOf(ctx, led, s.view, spec, now)
			if err != nil {
				return err
			}
			row.File, row.FromRun, row.NoSpec = "", fromRun, fromRun == ""
			rows = append(rows, row)
		}
		var errs []string
		for _, e := range loadErrs {
			errs = append(errs, e.Error())
		}
		s.render(w, http.StatusOK, "jobs", s.page(v, "Jobs", map[string]any{"Rows": rows, "Errors": errs, "Dir": s.opts.JobsDir}))
		return nil
	})
}

// recordedSpec is the spec of job's newest run (of its newest sparkRuns)
// whose recorded spec parses, read for view (no store secret expanded),
// and that run's id; none gives a bare spec of the name and "".
func recordedSpec(ctx context.Context, led ledger.Ledger, job string) (*jobs.Spec, string, error) {
	runs, err := led.Runs(ctx, job, sparkRuns)
	if err != nil {
		return nil, "", fmt.Errorf("job %s: runs: %w", job, err)
	}
	for _, run := range runs {
		if len(run.Spec) == 0 {
			continue
		}
		spec, err := jobs.ParseForView(run.Spec, run.SpecFile, run.Params)
		if err == nil && spec.Name == job {
			return spec, run.ID, nil
		}
	}
	return &jobs.Spec{Name: job}, "", nil
}

func jobOf(ctx context.Context, led ledger.Ledger, view viewFunc, spec *jobs.Spec, now time.Time) (jobRow, error) {
	row := jobRow{Name: spec.Name, File: spec.File, Cron: spec.Schedule, Zone: spec.Timezone, MaxStaleness: "-"}
	if row.Zone == "" {
		row.Zone = "UTC"
	}
	sched, err := schedule.FromSpec(spec)
	switch {
	case errors.Is(err, schedule.ErrNoSchedule):
		row.Words, row.Cron = "manual (no schedule)", "-"
	case err != nil:
		row.ScheduleErrors = err.Error()
	default:
		row.Words = describeCron(sched.Expr())
		t := now
		for range nextFires {
			if t = sched.Next(t); t.IsZero() {
				break
			}
			row.Next = append(row.Next, t)
		}
	}
	runs, err := led.Runs(ctx, spec.Name, sparkRuns)
	if err != nil {
		return row, fmt.Errorf("job %s: runs: %w", spec.Name, err)
	}
	if len(runs) > 0 {
		shards, err := led.Shards(ctx, runs[0].ID)
		if err != nil {
			return row, fmt.Errorf("run %s: shards: %w", runs[0].ID, err)
		}
		last := rowOf(view(runs[0], shards, now), runs[0])
		row.LastRun = &last
	}
	var durs []time.Duration
	for _, run := range slices.Backward(runs) {
		if run.State.Terminal() {
			durs = append(durs, run.UpdatedAt.Sub(run.CreatedAt))
		}
	}
	row.Spark = sparkSVG(durs)
	if d := spec.MaxStaleness.Duration; d > 0 {
		row.MaxStaleness = d.String()
	}
	// The same function as precog schedule list and the scheduler's
	// metrics: the three never disagree about a job's staleness.
	st, err := scheduler.StalenessOf(ctx, led, spec, now)
	if err != nil {
		return row, err
	}
	row.LastSuccess, row.Stale, row.Staleness = st.LastSuccess, st.Stale, st.String()
	return row, nil
}

var weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}

// describeCron says the common five-field shapes in words; anything else
// reads as "cron <expr>" (the expression is shown beside it anyway).
func describeCron(expr string) string {
	if strings.HasPrefix(expr, "@") {
		return map[string]string{"@hourly": "every hour", "@daily": "every day at midnight", "@midnight": "every day at midnight",
			"@weekly": "every Sunday at midnight", "@monthly": "on the 1st of every month at midnight", "@yearly": "every 1 January at midnight",
			"@annually": "every 1 January at midnight"}[expr] + orExpr(expr)
	}
	f := strings.Fields(expr)
	if len(f) != 5 {
		return "cron " + expr
	}
	mi, hr, dom, mon, dow := f[0], f[1], f[2], f[3], f[4]
	num := func(s string) (int, bool) { n, err := strconv.Atoi(s); return n, err == nil }
	m, mOK := num(mi)
	h, hOK := num(hr)
	if mon != "*" || (dom != "*" && dow != "*") {
		return "cron " + expr
	}
	switch {
	case strings.HasPrefix(mi, "*/") && hr == "*" && dom == "*" && dow == "*":
		return "every " + mi[2:] + " minutes"
	case mi == "*" && hr == "*" && dom == "*" && dow == "*":
		return "every minute"
	case mOK && hr == "*" && dom == "*" && dow == "*":
		return fmt.Sprintf("every hour at :%02d", m)
	case mOK && strings.HasPrefix(hr, "*/") && dom == "*" && dow == "*":
		return fmt.Sprintf("every %s hours at :%02d", hr[2:], m)
	case mOK && hOK && dom == "*" && dow == "*":
		return fmt.Sprintf("every day at %02d:%02d", h, m)
	case mOK && hOK && dom == "*" && dow == "1-5":
		return fmt.Sprintf("weekdays at %02d:%02d", h, m)
	case mOK && hOK && dom == "*":
		if d, ok := num(dow); ok && d >= 0 && d <= 7 {
			return fmt.Sprintf("every %s at %02d:%02d", weekdays[d%7], h, m)
		}
	case mOK && hOK && dow == "*":
		if d, ok := num(dom); ok {
			return fmt.Sprintf("on day %d of every month at %02d:%02d", d, h, m)
		}
	}
	return "cron " + expr
}

func orExpr(expr string) string {
	switch expr {
	case "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually":
		return ""
	}
	return "cron " + expr
}

// loadViewSpecs loads every spec of dir for the jobs page
// (scheduler.Dir.LoadForView, as precog schedule list does).
func loadViewSpecs(dir string, now time.Time) ([]*jobs.Spec, []error) {
	specs, errs, err := scheduler.Dir{Path: dir}.LoadForView(now)
	if err != nil {
		return nil, []error{fmt.Errorf("--jobs %s: %w", dir, err)}
	}
	return specs, errs
}
