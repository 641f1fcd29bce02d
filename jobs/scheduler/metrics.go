package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/precog-ml/precog/jobs"
)

var (
	leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "precog_scheduler_leader", Help: "1 while this scheduler replica holds the leader lease.",
	})
	ticksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_scheduler_ticks_total", Help: "Ticks recorded by this replica, by job and outcome (fired, skipped, missed).",
	}, []string{"job_name", "outcome"})
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "precog_job_last_success_timestamp_seconds", Help: "When the job's newest succeeded run finished (Unix seconds).",
	}, []string{"job_name"})
	stale = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "precog_job_stale", Help: "1 when the job's newest succeeded run is older than its max_staleness.",
	}, []string{"job_name"})
	staleAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "precog_job_staleness_seconds", Help: "Age of the job's newest succeeded run.",
	}, []string{"job_name"})
)

// Metrics are the scheduler's collectors, for the caller's registry.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{leaderGauge, ticksTotal, lastSuccess, stale, staleAge}
}

// Staleness is a job's freshness: its newest succeeded run and whether
// that is older than the spec's max_staleness. It is the one answer to
// "when did this job last succeed, and is it stale?": the scheduler's
// metrics, `precog schedule list` and the dashboard's jobs page all read
// it from StalenessOf, so they never disagree.
type Staleness struct {
	// LastSuccess is when the newest succeeded run finished (zero: none).
	LastSuccess time.Time
	// Run is that run's id ("" when none).
	Run string
	Age time.Duration
	// Bound is the spec's max_staleness (0: none).
	Bound time.Duration
	Stale bool
}

// String says the staleness in words, the same on every surface:
// "fresh: 5h0m0s old", "stale: 29h0m0s old", "stale: never succeeded",
// and without a bound "5h0m0s old" or "never succeeded".
func (st Staleness) String() string {
	age := st.Age.Round(time.Second).String()
	switch {
	case st.LastSuccess.IsZero() && st.Stale:
		return "stale: never succeeded"
	case st.LastSuccess.IsZero():
		return "never succeeded"
	case st.Stale:
		return "stale: " + age + " old"
	case st.Bound > 0:
		return "fresh: " + age + " old"
	}
	return age + " old"
}

// RunLister is what StalenessOf reads: any ledger (ledger.Ledger has it).
type RunLister interface {
	Runs(ctx context.Context, job string, limit int) ([]jobs.Run, error)
}

// stalenessPage is how many runs StalenessOf reads at a time, newest
// first, until it finds a success.
const stalenessPage = 200

// StalenessOf reads the job's newest succeeded run from the ledger: a job
// whose last success lies behind many failed runs is still found.
func StalenessOf(ctx context.Context, led RunLister, spec *jobs.Spec, now time.Time) (Staleness, error) {
	st := Staleness{Bound: spec.MaxStaleness.Duration}
	for limit := stalenessPage; ; limit *= 4 {
		runs, err := led.Runs(ctx, spec.Name, limit)
		if err != nil {
			return Staleness{}, fmt.Errorf("staleness of job %s: %w", spec.Name, err)
		}
		for _, r := range runs { // newest first
			if r.State == jobs.RunSucceeded {
				st.LastSuccess, st.Run = r.UpdatedAt, r.ID
				break
			}
		}
		if !st.LastSuccess.IsZero() || len(runs) < limit {
			break
		}
	}
	if !st.LastSuccess.IsZero() {
		st.Age = now.Sub(st.LastSuccess)
	}
	if st.Bound > 0 {
		st.Stale = st.LastSuccess.IsZero() || st.Age > st.Bound
	}
	return st, nil
}

// refreshStaleness updates the staleness metrics of every job (every
// replica does, leader or not, so any of them can be scraped).
func (s *Scheduler) refreshStaleness(ctx context.Context) {
	s.mu.Lock()
	list := make([]*jobs.Spec, 0, len(s.jobs))
	for _, j := range s.jobs {
		list = append(list, j.spec)
	}
	s.mu.Unlock()
	now := s.opts.Clock.Now()
	for _, spec := range list {
		st, err := StalenessOf(ctx, s.opts.Ledger, spec, now)
		if err != nil {
			s.log.Warn("staleness", "job", spec.Name, "err", err)
			continue
		}
		if !st.LastSuccess.IsZero() {
			lastSuccess.WithLabelValues(spec.Name).Set(float64(st.LastSuccess.Unix()))
			staleAge.WithLabelValues(spec.Name).Set(st.Age.Seconds())
		}
		stale.WithLabelValues(spec.Name).Set(b2f(st.Stale))
	}
}
