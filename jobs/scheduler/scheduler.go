// Package scheduler fires cron runs: every job spec of a directory with a
// schedule gets a run per tick, exactly once per (job, scheduled time)
// even when two replicas both believe they lead (the tick is unique in the
// ledger and commits with its run), with the overlap and catch-up policies
// of the spec. Replicas elect one leader with a lease in the ledger; a leader
// that cannot renew stops firing before its lease ends.
package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// SpecSource reads the job specs to schedule.
type SpecSource interface {
	// Read reads every spec file: one SpecFile per file, a bad one with
	// its error (named by file and field) while the good ones load. err:
	// the source itself could not be listed (nothing is known of any file).
	Read() (files []SpecFile, err error)
	// Render renders a loaded spec with a tick's params from the bytes it
	// was loaded from: firing never reads the file again, so a job whose
	// file broke keeps firing with its last good spec.
	Render(spec *jobs.Spec, params map[string]string) (*jobs.Spec, error)
}

// SpecFile is one file of a SpecSource: its spec, or why it did not load.
type SpecFile struct {
	File string
	Spec *jobs.Spec
	Err  error
}

func (o Options) withDefaults() Options {
	if o.Holder == "" {
		o.Holder = ledger.ProcessName()
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
	// loadErrs is the error logged for each bad file at the last Load, and
	// failing the error logged for each job at its last failed pass: an
	// error is logged when it changes, not at every reload or pass.
	loadErrs map[string]string
	failing  map[string]string
}

// staleEvery spaces the staleness metrics' refreshes.
const staleEvery = 10 * time.Second

// job is one scheduled spec.
type job struct {
	spec  *jobs.Spec
	sched *schedule.Schedule
	// seenAt is when this replica first loaded the job; since is when a
	// scheduler first saw it, as recorded in the ledger (zero until read):
	// a job without any tick starts with the first tick after since.
	seenAt, since time.Time
	// reloadErr: the job's file no longer loads; the job keeps firing with
	// spec, its last good one, and its ticks record why.
	reloadErr error
}

// New builds a scheduler; Run starts it.
func New(opts Options) *Scheduler {
	opts = opts.withDefaults()
	return &Scheduler{opts: opts, log: opts.Logger, jobs: map[string]*job{}, reload: make(chan struct{}, 1),
		loadErrs: map[string]string{}, failing: map[string]string{}}
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
// field; the others are scheduled. A job whose file no longer loads keeps
// firing with its last good spec (its ticks record the error); a job whose
// file is gone, or has no schedule any more, is unscheduled. Each file's
// error is logged when it changes, not at every reload. At start the
// caller refuses to run when any spec is bad.
func (s *Scheduler) Load() []error {
	files, err := s.opts.Specs.Read()
	if err != nil {
		// Nothing is known of any file: keep every job as it is.
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.loadErrs[""] != err.Error() {
			s.log.Error("job specs could not be listed; every job keeps its last good spec", "err", err)
		}
		s.loadErrs = map[string]string{"": err.Error()}
		return []error{err}
	}
	now := s.opts.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]*job{}
	fileErrs := map[string]error{}
	var errs []error
	for _, f := range files {
		sp, err := f.Spec, f.Err
		var sc *schedule.Schedule
		switch {
		case err != nil:
		case sp.Schedule == "":
			continue
		default:
			if sc, err = schedule.FromSpec(sp); err != nil {
				err = fmt.Errorf("%s: schedule: %w", f.File, err)
			} else if prev, ok := next[sp.Name]; ok {
				err = fmt.Errorf("%s: name: job %s is also defined in %s", f.File, sp.Name, prev.spec.File)
			}
		}
		if err != nil {
			errs = append(errs, err)
			fileErrs[f.File] = err
			continue
		}
		j := &job{spec: sp, sched: sc, seenAt: now}
		if old, ok := s.jobs[sp.Name]; ok {
			j.seenAt, j.since = old.seenAt, old.since
		}
		if old := s.jobs[sp.Name]; old == nil || old.reloadErr != nil || !bytes.Equal(old.spec.Raw, sp.Raw) || old.spec.File != sp.File {
			s.log.Info("scheduled", "job", sp.Name, "file", sp.File, "schedule", sp.Schedule, "timezone", sp.Timezone,
				"next", sc.Next(now).Format(time.RFC3339))
		}
		next[sp.Name] = j
	}
	// A job whose file became bad keeps firing with its last good spec.
	for name, old := range s.jobs {
		if _, ok := next[name]; ok {
			continue
		}
		if err, bad := fileErrs[old.spec.File]; bad {
			kept := *old
			kept.reloadErr = err
			next[name] = &kept
			continue
		}
		s.log.Info("unscheduled: its spec file is gone or has no schedule", "job", name, "file", old.spec.File)
	}
	logged := map[string]string{}
	for file, err := range fileErrs {
		logged[file] = err.Error()
		if s.loadErrs[file] == err.Error() {
			continue
		}
		var keeps []string
		for name, j := range next {
			if j.reloadErr != nil && j.spec.File == file {
				keeps = append(keeps, name)
			}
		}
		if len(keeps) > 0 {
			s.log.Error("job spec refused; the job keeps firing with its last good spec", "file", file, "jobs", keeps, "err", err)
		} else {
			s.log.Error("job spec refused; the others keep firing", "file", file, "err", err)
		}
	}
	for file := range s.loadErrs {
		if _, still := logged[file]; !still && file != "" {
			s.log.Info("job spec loads again", "file", file)
		}
	}
	s.loadErrs = logged
	s.jobs = next
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
	s.mu.Lock()
	list := make([]*job, 0, len(s.jobs))
	for _, j := range s.jobs {
		list = append(list, j)
	}
	s.mu.Unlock()
	// Leader or standby, a replica records when it first saw each job, so
	// that whichever leads next starts a new job from the same time.
	for _, j := range list {
		if j.since.IsZero() {
			if since, err := s.opts.Ledger.FirstSeen(ctx, j.spec.Name, j.seenAt); err == nil {
				j.since = since
			}
		}
	}
	if !s.lead(ctx) {
		return
	}
	for _, j := range list {
		if !s.stillLeading() {
			s.log.Warn("stopped firing: the leader lease could not be renewed in time", "holder", s.opts.Holder)
			return
		}
		s.noteFailure(j.spec.Name, s.fireDue(ctx, j))
	}
}

// noteFailure logs a job's failed pass when its error changed (a broken
// job is retried every pass, its error logged once), and its recovery.
func (s *Scheduler) noteFailure(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, was := s.failing[name]
	switch {
	case err == nil && was:
		delete(s.failing, name)
		s.log.Info("schedule pass recovered", "job", name)
	case err != nil && prev != err.Error():
		s.failing[name] = err.Error()
		s.log.Error("schedule pass", "job", name, "err", err)
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
			since, err := s.opts.Ledger.FirstSeen(ctx, j.spec.Name, j.seenAt)
			if err != nil {
				return err
			}
			j.since = since
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
			Reason: j.reason(fmt.Sprintf("later than starting_deadline or beyond catchup %s", j.spec.Catchup))}, nil, nil)
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
		case jobs.ConcurrencyForbid:
			s.record(ctx, ledger.Tick{Job: name, ScheduledFor: t, Outcome: ledger.TickSkipped,
				Reason: j.reason(fmt.Sprintf("concurrency forbid: run %s is still %s", open[0].ID, open[0].State))}, nil, nil)
			return nil
		case jobs.ConcurrencyReplace:
			for _, r := range open {
				s.log.Info("concurrency replace: cancelling the open run", "job", name, "run", r.ID)
				if err := s.opts.Cancel(ctx, r); err != nil {
					return fmt.Errorf("cancel run %s: %w", r.ID, err)
				}
			}
		}
	}
	params := schedule.Params(t, j.sched.Location())
	spec, err := s.opts.Specs.Render(j.spec, params)
	if err != nil {
		return fmt.Errorf("render the spec of %s: %w", j.spec.File, err)
	}
	run, shards, err := s.opts.Plan(ctx, spec)
	if err != nil {
		return err
	}
	if s.record(ctx, ledger.Tick{Job: name, ScheduledFor: t, Outcome: ledger.TickFired, Reason: j.reason("")}, &run, shards) && s.opts.OnFired != nil {
		s.opts.OnFired(ctx, run)
	}
	return nil
}

// reason is a tick's reason, with the reload error of a job that fired
// with its last good spec.
func (j *job) reason(base string) string {
	if j.reloadErr == nil {
		return base
	}
	r := "spec reload failed, the job keeps its last good spec: " + j.reloadErr.Error()
	if base != "" {
		r = base + "; " + r
	}
	return r
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
