package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks"
)

// The executor is the one claim loop of precog: `precog run` (RunLocal),
// `precog run --db` and `precog worker` (Worker) and backfills (which run
// either) all claim a shard, run one attempt and settle its outcome here,
// under one error policy:
//
//   - committed: every sink committed; the ledger records it (even when
//     interrupted meanwhile, or a resume would compute it again);
//   - lost: the lease was lost or the run finished (cancelled, failed by
//     another holder): nothing is recorded, the shard is not this loop's;
//   - released: the process was interrupted; the shard goes back without
//     spending an attempt;
//   - retried: a transient error (a store restarting, a network blip)
//     within retry.transient_window since the loop's first one: the loop
//     backs off (jitter, at most 5 s, well inside the shard's lease), gives
//     the shard back without spending an attempt and claims again;
//   - failed: any other error spends an attempt (retry.max_attempts);
//     once the window has passed, a transient error counts as one too;
//   - permanent: retrying cannot help (a full disk, a permission, bad
//     data): the shard fails at once with its cause.
//
// A local run and a cluster run differ only in their mode (execMode): the
// ledger they claim from, and what follows an outcome (a local run stops
// at a permanent error and reports the shards out of attempts when the
// rest are done; a worker ends the run and publishes it after its last
// commit). Sink locks are the other difference: a local run holds them for
// the whole run (RunLocal), a worker takes them at publish (Publisher).

// outcome is how one shard attempt ended, once the ledger recorded it.
type outcome int

const (
	outCommitted outcome = iota
	outLost
	outReleased
	outRetried
	outFailed
	outPermanent
)

// label is the outcome's name in metrics and ShardEvent.Outcome.
func (o outcome) label() string {
	switch o {
	case outCommitted:
		return "committed"
	case outLost:
		return "lost"
	case outReleased, outRetried:
		return "released"
	}
	return "failed"
}

// shardTask is a claimed shard of a run made ready to execute here.
type shardTask struct {
	run   jobs.Run
	shard jobs.Shard
	job   *Job
	snks  []sinks.Sink
	info  sinks.RunInfo
	// rejectsDir receives reject files ("": none); keepRejects bounds the
	// rejects kept for the ledger's commit.
	rejectsDir  string
	keepRejects int
	// stats accumulates the attempt's stage times; onRows, when set, is
	// called as rows are read.
	stats  *StageStats
	onRows func(int64)
	// done, when set, is called once the outcome was settled (gives back
	// what claim made ready).
	done func()
}

// attemptResult is a settled attempt.
type attemptResult struct {
	outcome outcome
	// err is the attempt's error (nil when committed), or the ledger's
	// when recording the outcome failed (ledgerOp then names the call).
	err      error
	ledgerOp string
	counts   jobs.Counts
	// exhausted: a failed attempt was the shard's last (max_attempts).
	exhausted bool
	duration  time.Duration
	stats     *StageStats
}

// execMode is what differs between a local run and a worker: where
// shards come from and what follows each outcome. Every method reports
// whether the loop goes on.
type execMode interface {
	// claim leases the next shard and makes its run ready. ledger.ErrNoShard:
	// nothing to claim now; errClaimSettled: the mode dealt with what it
	// claimed (a run it cannot execute) and claims again.
	claim(ctx context.Context, worker string) (shardTask, error)
	// idle runs when nothing is claimable.
	idle(ctx context.Context, worker string) bool
	// claimFailed runs on a claim error; failures counts them in a row.
	claimFailed(ctx context.Context, worker string, err error, failures int) bool
	// settled runs after each attempt's outcome was recorded.
	settled(ctx context.Context, worker string, t shardTask, r attemptResult) bool
}

// errClaimSettled: claim dealt with the shard it claimed itself.
var errClaimSettled = errors.New("claimed shard settled by the mode")

// executor runs shard attempts for its mode's claim loops.
type executor struct {
	led ledger.Store
	// lease is a claimed shard's lease, renewed every lease/3; stall fails
	// an attempt that read no row for this long.
	lease, stall time.Duration
	log          *slog.Logger
	// onShard, when set, receives every settled attempt (WorkerOptions.OnShard).
	onShard func(ShardEvent)
}

// loop is one claim loop: it claims until ctx ends or the mode stops it.
// Attempts run under work, which may outlive ctx (a worker's drain).
func (e *executor) loop(ctx, work context.Context, worker string, m execMode, kick <-chan struct{}) {
	var streak transientStreak
	failures := 0
	for ctx.Err() == nil {
		t, err := m.claim(ctx, worker)
		switch {
		case errors.Is(err, ledger.ErrNoShard):
			failures = 0
			if !m.idle(ctx, worker) {
				return
			}
			continue
		case errors.Is(err, errClaimSettled):
			failures = 0
			continue
		case err != nil:
			failures++
			if !m.claimFailed(ctx, worker, err, failures) {
				return
			}
			continue
		}
		failures = 0
		r := e.attempt(work, worker, t, &streak, kick)
		if r.outcome == outCommitted {
			committedHere()
		}
		goOn := m.settled(work, worker, t, r)
		if t.done != nil {
			t.done()
		}
		if !goOn {
			return
		}
	}
}

// attempt runs one attempt of t and records its outcome in the ledger.
func (e *executor) attempt(ctx context.Context, worker string, t shardTask, streak *transientStreak, kick <-chan struct{}) attemptResult {
	began := time.Now()
	stats := t.stats
	if stats == nil {
		stats = &StageStats{}
	}
	var cost jobs.Cost
	counts, sample, profile, err := runAttempt(ctx, attempt{led: e.led, job: t.job, snks: t.snks, info: t.info, run: t.run, shard: t.shard, worker: worker,
		lease: e.lease, stall: e.stall, rejectsDir: t.rejectsDir, keepRejects: t.keepRejects, stats: stats, onRows: t.onRows, kick: kick, cost: &cost})
	r := e.settle(ctx, worker, t, attemptOutcome{counts: counts, sample: sample, profile: profile, cost: cost, err: err}, streak)
	r.duration, r.stats = time.Since(began), stats
	e.report(ShardEvent{Run: t.run.ID, Worker: worker, Shard: t.shard.Index, Outcome: r.outcome.label(), Counts: r.counts, Duration: r.duration, Stats: stats})
	return r
}

// attemptOutcome is what runAttempt returned.
type attemptOutcome struct {
	counts  jobs.Counts
	sample  []jobs.Reject
	profile string
	// cost is what the attempt used (CPU, GPU), committed with the shard.
	cost jobs.Cost
	err  error
}

// completeTimeout bounds recording a commit (the sinks committed: it is
// recorded even when the attempt's context ended meanwhile).
const completeTimeout = 30 * time.Second

// settle records an attempt's outcome under the one error policy (see the
// top of this file).
func (e *executor) settle(ctx context.Context, worker string, t shardTask, a attemptOutcome, streak *transientStreak) attemptResult {
	run, sh := t.run, t.shard
	bg := context.WithoutCancel(ctx)
	r := attemptResult{counts: a.counts, err: a.err}
	if a.err == nil {
		streak.reset()
		cctx, cancel := context.WithTimeout(bg, completeTimeout)
		err := e.led.Complete(cctx, ledger.CompleteParams{RunID: run.ID, Shard: sh.Index, Worker: worker, Counts: a.counts, Sample: a.sample, Profile: a.profile, Cost: a.cost})
		cancel()
		if err != nil {
			// Another attempt committed first, or the run ended.
			e.log.Info("shard result not recorded", "run", run.ID, "shard", sh.Index, "worker", worker, "err", err)
			e.letGo(bg, run.ID, sh.Index, worker, err)
			return attemptResult{outcome: outLost, err: err, ledgerOp: "complete", counts: a.counts}
		}
		e.log.Debug("shard committed", "run", run.ID, "shard", sh.Index, "worker", worker,
			"rows_in", a.counts.RowsIn, "rows_out", a.counts.RowsOut, "rejected", a.counts.Rejected)
		r.outcome = outCommitted
		return r
	}
	maxAttempts := t.job.Spec.Retry.MaxAttempts
	fail := ledger.FailParams{RunID: run.ID, Shard: sh.Index, Worker: worker, Msg: a.err.Error(), MaxAttempts: maxAttempts}
	class := retry.Classify(a.err)
	switch {
	case errors.Is(a.err, ledger.ErrLeaseLost) || errors.Is(a.err, ledger.ErrRunFinished):
		e.log.Info("shard attempt stopped: lease lost or run finished", "run", run.ID, "shard", sh.Index, "worker", worker, "err", a.err)
		e.letGo(bg, run.ID, sh.Index, worker, a.err)
		r.outcome = outLost
		return r
	case ctx.Err() != nil:
		// Interrupted: give the shard back without spending an attempt.
		_ = e.led.Release(bg, ledger.ReleaseParams{RunID: run.ID, Shard: sh.Index, Worker: worker})
		r.outcome = outReleased
		return r
	case class == retry.Transient && streak.retry(ctx, t.job.Spec.Retry.TransientWindow.Duration):
		// A stale attempt (its lease taken over, its run ended: a worker
		// thawed after a freeze sees its connections ended) stops as one;
		// it does not retry a shard that is no longer its own.
		if rerr := e.led.Release(bg, ledger.ReleaseParams{RunID: run.ID, Shard: sh.Index, Worker: worker}); errors.Is(rerr, ledger.ErrLeaseLost) || errors.Is(rerr, ledger.ErrRunFinished) {
			e.log.Info("shard attempt stopped: lease lost or run finished", "run", run.ID, "shard", sh.Index, "worker", worker, "err", a.err, "ledger", rerr)
			r.outcome = outLost
			return r
		}
		e.log.Warn("transient error; retrying the shard after a backoff", "run", run.ID, "shard", sh.Index, "worker", worker, "err", a.err)
		r.outcome = outRetried
		return r
	}
	fail.Retry = class != retry.Permanent
	if ferr := e.led.Fail(bg, fail); ferr != nil {
		// The lease was lost (another attempt owns the shard, or the run
		// ended): this attempt's error is a consequence, not a failure of
		// the shard, and must not read as one.
		e.log.Info("shard result not recorded", "run", run.ID, "shard", sh.Index, "worker", worker, "err", a.err, "ledger", ferr)
		return attemptResult{outcome: outLost, err: ferr, ledgerOp: "record failure", counts: a.counts}
	}
	if class == retry.Permanent {
		r.outcome = outPermanent
		return r
	}
	e.log.Warn("shard failed", "run", run.ID, "shard", sh.Index, "worker", worker, "attempt", sh.Attempts, "max_attempts", maxAttempts, "err", a.err)
	r.outcome, r.exhausted = outFailed, sh.Attempts >= maxAttempts
	return r
}

// letGo tells the ledger that this holder of a shard of a finished run
// stopped: Release clears its lease mark on a cancelled run's shard, and
// `precog cancel`, which waits for the last holder, returns at once.
func (e *executor) letGo(ctx context.Context, runID string, shard int, worker string, cause error) {
	if !errors.Is(cause, ledger.ErrRunFinished) {
		return
	}
	if err := e.led.Release(ctx, ledger.ReleaseParams{RunID: runID, Shard: shard, Worker: worker}); err != nil && !errors.Is(err, ledger.ErrRunFinished) && !errors.Is(err, ledger.ErrLeaseLost) {
		e.log.Warn("tell the ledger the attempt stopped", "run", runID, "shard", shard, "worker", worker, "err", err)
	}
}

// report counts a settled attempt in the metrics and passes it on.
func (e *executor) report(ev ShardEvent) {
	shardsTotal.WithLabelValues(ev.Outcome).Inc()
	if ev.Outcome == outCommitted.label() {
		shardSeconds.Observe(ev.Duration.Seconds())
		rowsTotal.WithLabelValues("read").Add(float64(ev.Counts.RowsIn))
		rowsTotal.WithLabelValues("written").Add(float64(ev.Counts.RowsOut))
		rowsTotal.WithLabelValues("rejected").Add(float64(ev.Counts.Rejected))
	}
	if e.onShard != nil {
		e.onShard(ev)
	}
}

// transientStreak is one claim loop's run of transient failures: retried
// with backoff until the window since the first one has passed.
type transientStreak struct {
	first time.Time
	n     int
}

// retry sleeps the next backoff and reports true while window
// (retry.transient_window of the shard's spec) allows another try; false
// when it has passed (the failure then counts as an attempt), window is
// not positive, or ctx ended.
func (s *transientStreak) retry(ctx context.Context, window time.Duration) bool {
	if window <= 0 {
		return false
	}
	policy := retry.Policy{Window: window}
	if s.first.IsZero() {
		s.first = time.Now()
	}
	d := policy.Delay(s.n)
	if time.Since(s.first)+d > window {
		s.reset()
		return false
	}
	s.n++
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *transientStreak) reset() { s.first, s.n = time.Time{}, 0 }

// endRunFailed fails a run for good: its ledger record and what it wrote.
func endRunFailed(ctx context.Context, led ledger.Store, t shardTask, cause error, log *slog.Logger) {
	runStores{led: led, snks: t.snks, info: t.info, log: log}.end(ctx, jobs.RunFailed, cause)
}

// shardFailure names a shard that failed for good and why.
func shardFailure(t shardTask, r attemptResult) string {
	return fmt.Sprintf("shard %d: %v", t.shard.Index, r.err)
}
