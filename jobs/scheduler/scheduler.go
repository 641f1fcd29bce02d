// Package scheduler fires cron runs: every job spec of a directory with a
// schedule gets a run per tick, exactly once per (job, scheduled time)
// even when two replicas both believe they lead (the tick is unique in the
// ledger and commits with its run), with the overlap and catch-up policies
// of the spec. Replicas elect one leader with a lease in the ledger; a leader
// that cannot renew stops firing before its lease ends.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/schedule"
)

// Ledger is what the scheduler needs of a ledger.
type Ledger interface {
	ledger.Ledger
	ledger.Scheduler
}

// Clock is the scheduler's time source (tests drive a fake one).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Planner turns a spec rendered with a tick's params into a run and its
// shards (source metadata only): runner.PlanRun in production.
type Planner func(ctx context.Context, spec *jobs.Spec) (jobs.Run, []jobs.Shard, error)

// Canceller ends an open run for concurrency: replace (marks it cancelled
// and cleans its sinks).
type Canceller func(ctx context.Context, run jobs.Run) error

// Options configures a scheduler.
type Options struct {
	// Specs loads the job specs (the --jobs directory), with params; it is
	// called at start and on every Reload.
	Specs  SpecSource
	Ledger Ledger
	Plan   Planner
	Cancel Canceller
	// Holder names this replica in the leader lease (default host-pid).
	Holder string
	// LeaseTTL is the leader lease (default 15s), renewed every TTL/3; a
	// leader stops firing once TTL/2 passed without a renewal.
	LeaseTTL time.Duration
	// Every bounds the wait between two passes (default 1s).
	Every  time.Duration
	Clock  Clock
	Logger *slog.Logger
	// OnFired is called after a run was created (embedded mode runs it).
	OnFired func(ctx context.Context, run jobs.Run)
}

// SpecSource loads the job specs to schedule; a bad file is returned in
// errs (named by file and field) while the good ones load.
type SpecSource interface {
	Load(params map[string]string) (specs []*jobs.Spec, errs []error)
	// LoadOne renders one job's spec with a tick's params.
	LoadOne(file string, params map[string]string) (*jobs.Spec, error)
}

func (o Options) withDefaults() Options {
	if o.Holder == "" {
		host, _ := os.Hostname()
		o.Holder = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 15 * time.Second
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// leaseName is the one leader lease of all schedulers of a ledger.
const leaseName = "precog-scheduler"

// Scheduler fires the runs of scheduled jobs.
type Scheduler struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	jobs   map[string]*job // by job name
	leader bool
	// renewed is when the lease was last renewed (this replica's clock).
	renewed time.Time
	reload  chan struct{}
	// staleAt is when the staleness metrics were last refreshed.
	staleAt time.Time
}

// staleEvery spaces the staleness metrics' refreshes.
const staleEvery = 10 * time.Second

// job is one scheduled spec.
type job struct {
	spec  *jobs.Spec
	sched *schedule.Schedule
	// since is when this replica first saw the job without any tick in the
	// ledger: its first tick is the next one after.
	since time.Time
}

// New builds a scheduler; Run starts it.
func New(opts Options) *Scheduler {
	opts = opts.withDefaults()
	return &Scheduler{opts: opts, log: opts.Logger, jobs: map[string]*job{}, reload: make(chan struct{}, 1)}
}

// Reload re-reads the specs at the next pass (SIGHUP, a directory change).
func (s *Scheduler) Reload() {
	select {
	case s.reload <- struct{}{}:
	default:
	}
}

// Leader reports whether this replica holds the lease now.
func (s *Scheduler) Leader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader
}

// Load reads the specs: every bad spec is an error naming its file and
// field; the others are scheduled. At start the caller refuses to run when
// any is bad.
func (s *Scheduler) Load() []error {
	specs, errs := s.opts.Specs.Load(nil)
	next := map[string]*job{}
	for _, sp := range specs {
		if sp.Schedule == "" {
			continue
		}
		sc, err := schedule.FromSpec(sp)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: schedule: %w", sp.File, err))
			continue
		}
		if prev, ok := next[sp.Name]; ok {
			errs = append(errs, fmt.Errorf("%s: name: job %s is also defined in %s", sp.File, sp.Name, prev.spec.File))
			continue
		}
		next[sp.Name] = &job{spec: sp, sched: sc}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, j := range next {
		if old, ok := s.jobs[name]; ok {
			j.since = old.since
		}
	}
	// A job whose spec became bad keeps firing with its last good spec.
	for _, err := range errs {
		s.log.Error("job spec refused; the others keep firing", "err", err)
	}
	for name, old := range s.jobs {
		if _, ok := next[name]; !ok && len(errs) > 0 {
			next[name] = old
		}
	}
	s.jobs = next
	for name, j := range next {
		s.log.Info("scheduled", "job", name, "schedule", j.spec.Schedule, "timezone", j.spec.Timezone, "next", j.sched.Next(s.opts.Clock.Now()).Format(time.RFC3339))
	}
	return errs
}

// Run leads (when it can) and fires until ctx ends, then resigns.
func (s *Scheduler) Run(ctx context.Context) error {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.opts.Ledger.Resign(rctx, leaseName, s.opts.Holder)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.reload:
			s.Load()
		default:
		}
		s.pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-s.reload:
			s.Load()
		case <-s.opts.Clock.After(s.opts.Every):
		}
	}
}

// pass refreshes the staleness metrics, renews the lease and, while
// leading, fires every due tick.
func (s *Scheduler) pass(ctx context.Context) {
	if now := s.opts.Clock.Now(); now.Sub(s.staleAt) >= staleEvery {
		s.staleAt = now
		s.refreshStaleness(ctx)
	}
	if !s.lead(ctx) {
		return
	}
	s.mu.Lock()
	list := make([]*job, 0, len(s.jobs))
	for _, j := range s.jobs {
		list = append(list, j)
	}
	s.mu.Unlock()
	for _, j := range list {
		if !s.stillLeading() {
			s.log.Warn("stopped firing: the leader lease could not be renewed in time", "holder", s.opts.Holder)
			return
		}
		if err := s.fireDue(ctx, j); err != nil {
			s.log.Error("schedule pass", "job", j.spec.Name, "err", err)
		}
	}
}

// lead takes or renews the leader lease.
func (s *Scheduler) lead(ctx context.Context) bool {
	now := s.opts.Clock.Now()
	lctx, cancel := context.WithTimeout(ctx, s.opts.LeaseTTL/3)
	ok, err := s.opts.Ledger.Lead(lctx, leaseName, s.opts.Holder, s.opts.LeaseTTL)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.leader
	switch {
	case err != nil:
		// Keep leading only while the lease surely holds.
		s.log.Warn("leader lease renewal failed", "holder", s.opts.Holder, "err", err)
		s.leader = s.leader && now.Sub(s.renewed) < s.opts.LeaseTTL/2
	default:
		s.leader = ok
		if ok {
			s.renewed = now
		}
	}
	leaderGauge.Set(b2f(s.leader))
	if s.leader != was {
		s.log.Info("leadership changed", "holder", s.opts.Holder, "leader", s.leader)
	}
	return s.leader
}

// stillLeading: the last renewal is recent enough that no other replica
// can have taken the lease (half the TTL, for clock drift and delays).
func (s *Scheduler) stillLeading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader && s.opts.Clock.Now().Sub(s.renewed) < s.opts.LeaseTTL/2
}

// fireDue plans the job's ticks since the last recorded one and records
// each: fired (with its run), skipped (overlap) or missed (too late).
func (s *Scheduler) fireDue(ctx context.Context, j *job) error {
	now := s.opts.Clock.Now()
	last, err := s.opts.Ledger.LastTick(ctx, j.spec.Name)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if j.since.IsZero() {
			j.since = now
		}
		last.ScheduledFor = j.since
	case err != nil:
		return err
	}
	d, err := j.sched.Plan(last.ScheduledFor, now, schedule.PolicyOf(j.spec))
	if err != nil {
		return err
	}
	for _, t := range d.Missed {
		s.record(ctx, ledger.Tick{Job: j.spec.Name, ScheduledFor: t, Outcome: ledger.TickMissed,
			Reason: fmt.Sprintf("later than starting_deadline or beyond catchup %s", j.spec.Catchup)}, nil, nil)
	}
	for _, t := range d.Fire {
		if err := s.fire(ctx, j, t); err != nil {
			return fmt.Errorf("tick %s: %w", t.Format(time.RFC3339), err)
		}
	}
	return nil
}

// fire applies the overlap policy and creates the tick's run.
func (s *Scheduler) fire(ctx context.Context, j *job, t time.Time) error {
	name := j.spec.Name
	open, err := s.openRuns(ctx, name)
	if err != nil {
		return err
	}
	if len(open) > 0 {
		switch j.spec.Concurrency {
		case "forbid":
			s.record(ctx, ledger.Tick{Job: name, ScheduledFor: t, Outcome: ledger.TickSkipped,
				Reason: fmt.Sprintf("concurrency forbid: run %s is still %s", open[0].ID, open[0].State)}, nil, nil)
			return nil
		case "replace":
			for _, r := range open {
				s.log.Info("concurrency replace: cancelling the open run", "job", name, "run", r.ID)
				if err := s.opts.Cancel(ctx, r); err != nil {
					return fmt.Errorf("cancel run %s: %w", r.ID, err)
				}
			}
		}
	}
	params := schedule.Params(t, j.sched.Location())
	spec, err := s.opts.Specs.LoadOne(j.spec.File, params)
	if err != nil {
		return err
	}
	run, shards, err := s.opts.Plan(ctx, spec)
	if err != nil {
		return err
	}
	if s.record(ctx, ledger.Tick{Job: name, ScheduledFor: t, Outcome: ledger.TickFired}, &run, shards) && s.opts.OnFired != nil {
		s.opts.OnFired(ctx, run)
	}
	return nil
}

// record stores a tick; it reports whether this replica recorded it (a
// tick another leader recorded first is not an error).
func (s *Scheduler) record(ctx context.Context, t ledger.Tick, run *jobs.Run, shards []jobs.Shard) bool {
	err := s.opts.Ledger.RecordTick(ctx, t, run, shards)
	switch {
	case errors.Is(err, ledger.ErrTickExists):
		s.log.Info("tick already recorded by another scheduler", "job", t.Job, "scheduled_for", t.ScheduledFor.Format(time.RFC3339))
		return false
	case err != nil:
		s.log.Error("record tick", "job", t.Job, "scheduled_for", t.ScheduledFor.Format(time.RFC3339), "outcome", t.Outcome, "err", err)
		return false
	}
	ticksTotal.WithLabelValues(t.Job, t.Outcome).Inc()
	attrs := []any{"job", t.Job, "scheduled_for", t.ScheduledFor.Format(time.RFC3339), "outcome", t.Outcome}
	if run != nil {
		attrs = append(attrs, "run", run.ID)
	}
	if t.Reason != "" {
		attrs = append(attrs, "reason", t.Reason)
	}
	s.log.Info("tick", attrs...)
	return true
}

// openRuns lists the job's non-terminal runs, newest first.
func (s *Scheduler) openRuns(ctx context.Context, name string) ([]jobs.Run, error) {
	runs, err := s.opts.Ledger.Runs(ctx, name, 50)
	if err != nil {
		return nil, err
	}
	var open []jobs.Run
	for _, r := range runs {
		if !r.State.Terminal() {
			open = append(open, r)
		}
	}
	return open, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
