package scheduler

import (
	"context"
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
// that is older than the spec's max_staleness.
type Staleness struct {
	LastSuccess time.Time
	Age         time.Duration
	Stale       bool
}

// StalenessOf reads the job's newest succeeded run from the ledger.
func StalenessOf(ctx context.Context, led Ledger, spec *jobs.Spec, now time.Time) (Staleness, error) {
	runs, err := led.Runs(ctx, spec.Name, 200)
	if err != nil {
		return Staleness{}, err
	}
	var st Staleness
	for _, r := range runs { // newest first
		if r.State == jobs.RunSucceeded {
			st.LastSuccess = r.UpdatedAt
			break
		}
	}
	if !st.LastSuccess.IsZero() {
		st.Age = now.Sub(st.LastSuccess)
	}
	if max := spec.MaxStaleness.Duration; max > 0 {
		st.Stale = st.LastSuccess.IsZero() || st.Age > max
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
