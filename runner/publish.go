package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/precog-ml/precog/internal/hll"
	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks"
)

// maxRecomputeRounds bounds how often Stage may send lost shards back to be
// recomputed before the run gives up: a store that keeps losing data (a
// TTL shorter than the run, a Redis that keeps evicting) fails the run
// instead of looping.
const maxRecomputeRounds = 3

// ErrDuplicateKeys means keys repeat across shards: the run failed and
// nothing was published.
var ErrDuplicateKeys = errors.New("duplicate keys")

// errLost is what stageAll returns when sinks lost committed shards.
type errLost struct {
	shards []int
	causes []string
}

func (e *errLost) Error() string {
	return fmt.Sprintf("sinks lost %d committed shard(s): %v", len(e.shards), e.causes)
}

// committedShards lists the run's committed shards as the sinks verify them.
func committedShards(shards []jobs.Shard) []sinks.CommittedShard {
	out := make([]sinks.CommittedShard, 0, len(shards))
	for _, s := range shards {
		if s.State == jobs.ShardCommitted {
			out = append(out, sinks.CommittedShard{Index: s.Index, Rows: s.Counts.RowsOut})
		}
	}
	return out
}

// stageAll is phase one of the publish on every sink: nothing is visible
// until every sink staged. Shards any sink lost come back as *errLost;
// duplicates as an error wrapping ErrDuplicateKeys.
// Transient errors are retried under policy.
func stageAll(ctx context.Context, led ledger.Ledger, snks []sinks.Sink, info sinks.RunInfo, policy retry.Policy) error {
	shards, err := led.Shards(ctx, info.RunID)
	if err != nil {
		return err
	}
	if err := checkSketches(shards); err != nil {
		return err
	}
	committed := committedShards(shards)
	lost := &errLost{}
	for _, s := range snks {
		err := policy.Do(ctx, func(ctx context.Context) error { return s.Stage(ctx, info, committed) })
		var me *sinks.MissingError
		var de *sinks.DuplicateKeyError
		switch {
		case err == nil:
		case errors.As(err, &me):
			lost.shards = append(lost.shards, me.Shards...)
			lost.causes = append(lost.causes, me.Error())
		case errors.As(err, &de):
			return fmt.Errorf("%w: %w", ErrDuplicateKeys, err)
		default:
			return fmt.Errorf("sink %s: stage run %s: %w", s.Name(), info.RunID, err)
		}
	}
	if len(lost.shards) > 0 {
		slices.Sort(lost.shards)
		lost.shards = slices.Compact(lost.shards)
		return lost
	}
	return nil
}

// checkSketches merges the committed shards' key sketches and fails when
// keys repeat across shards beyond the sketch's error (5 standard errors).
// Within a shard duplicates are found exactly while it runs; stores that can
// tell exactly (Postgres's unique index) report at their own Stage.
func checkSketches(shards []jobs.Shard) error {
	merged := hll.New()
	for _, s := range shards {
		if s.State != jobs.ShardCommitted || s.Counts.KeySketch == "" {
			continue
		}
		sk, err := hll.Decode(s.Counts.KeySketch)
		if err != nil {
			return fmt.Errorf("shard %d: %w", s.Index, err)
		}
		merged.Merge(sk)
	}
	if dup, thr := merged.Duplicates(); dup > thr {
		return fmt.Errorf("%w: about %.0f of %d keys appear in more than one shard (estimated from the shards' key sketches; keys must be unique per run)",
			ErrDuplicateKeys, dup, merged.Count())
	}
	return nil
}

// publishAll is phase two: the atomic cutover of every sink, in order
// (Redis last: it is what applications read). before, when set, runs
// before each sink's Publish: the cluster publisher checks there that it
// still holds the run's publish lease and the run is still publishing, so
// that a publisher whose lease was taken over (or whose run ended) stops
// before it moves one more sink.
func publishAll(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo, policy retry.Policy, log *slog.Logger, before func(context.Context) error) error {
	for _, s := range snks {
		if before != nil {
			if err := before(ctx); err != nil {
				return fmt.Errorf("sink %s: not published: %w", s.Name(), err)
			}
		}
		if err := policy.Do(ctx, func(ctx context.Context) error { return s.Publish(ctx, info) }); err != nil {
			return fmt.Errorf("sink %s: publish run %s (rerun the same command to retry the publish): %w", s.Name(), info.RunID, err)
		}
		log.Info("published", "sink", s.Name(), "run", info.RunID, "version", info.Version)
	}
	return nil
}

// publishLeaser is the ledger's publish lease, checked before each sink.
type publishLeaser interface {
	HeartbeatPublish(ctx context.Context, p ledger.PublishLeaseParams) error
}

// publishLease is a cluster publisher's lease on a run's publish step.
type publishLease struct {
	led    publishLeaser
	worker string
	d      time.Duration
}

// publisher is the one publish sequence, for a local run (runAndPublish),
// a worker's publish step (publishStep) and `precog publish --accept`
// (PublishHeld): the reject limit over the whole run, the sinks' locks
// (taken here unless the caller holds them for the run), phase one on
// every sink, the checks, phase two, and the published profile recorded
// as the next run's baseline. What a stop means (retry the publish,
// recompute, hold, fail the run) is the caller's: the step and whether
// it is final come back in a *publishError.
type publisher struct {
	led  ledger.Store
	snks []sinks.Sink
	info sinks.RunInfo
	spec *jobs.Spec
	log  *slog.Logger
	// lease, when set, is renewed and checked before each sink's Publish,
	// so that a publisher whose lease was taken over (or whose run ended)
	// stops before it moves one more sink.
	lease *publishLease
	// locksHeld: the caller holds every sink's lock (a local run holds them
	// for the whole run); otherwise Publish takes them.
	locksHeld bool
	// accepted: a person accepted a run held by its checks; the checks are
	// not evaluated again, and the run's profile becomes the baseline.
	accepted bool
}

// publishError is where a publish stopped. final: retrying cannot help
// (duplicate keys, failed checks, too many rejects, a later run published
// meanwhile); the run fails and its staged data goes. Otherwise the
// publish may be retried: lost shards (*errLost) are recomputed first; a
// held run (ErrHeld) waits for a person.
type publishError struct {
	step  string // rejects | lock | stage | checks | publish
	final bool
	err   error
}

func (e *publishError) Error() string { return e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

// policy is how transient store errors are retried (retry.transient_window).
func (p *publisher) policy() retry.Policy { return policyOf(p.spec) }

// Publish publishes run in every sink, or says where and why it stopped.
func (p *publisher) Publish(ctx context.Context, run jobs.Run) error {
	stop := func(step string, final bool, err error) error {
		return &publishError{step: step, final: final, err: err}
	}
	if max := p.spec.MaxRejected(); float64(run.Counts.Rejected) > max*float64(run.Counts.RowsIn) {
		return stop("rejects", true, fmt.Errorf("%w: %d of %d rows rejected, more than max_rejected_fraction %g", ErrTooManyRejects, run.Counts.Rejected, run.Counts.RowsIn, max))
	}
	if !p.locksHeld {
		holder := sinks.ThisProcess(p.info) // a lease of the sinks' default
		if p.lease != nil {
			holder.Lease = p.lease.d // the targets lapse with the publish step
		}
		lctx, unlock, err := LockSinks(ctx, p.snks, p.info, holder)
		if err != nil {
			return stop("lock", false, err)
		}
		defer unlock()
		ctx = lctx
	}
	if err := stageAll(ctx, p.led, p.snks, p.info, p.policy()); err != nil {
		return stop("stage", errors.Is(err, ErrDuplicateKeys), err)
	}
	stopAfterStage()
	checked, err := p.check(ctx, run)
	if err != nil {
		return stop("checks", errors.Is(err, ErrChecksFailed), err)
	}
	var before func(context.Context) error
	if l := p.lease; l != nil {
		before = func(ctx context.Context) error {
			return l.led.HeartbeatPublish(ctx, ledger.PublishLeaseParams{RunID: p.info.RunID, Worker: l.worker, Lease: l.d})
		}
	}
	if err := publishAll(ctx, p.snks, p.info, p.policy(), p.log, before); err != nil {
		// A later run of the target published meanwhile (this run is an
		// old one retried, or its publisher froze): publishing it would
		// move readers back. Its unpublished data goes; a sink that
		// published it already keeps it (Abort refuses a published
		// version), and the rest stay on the later version.
		se := (*sinks.SupersededError)(nil)
		return stop("publish", errors.As(err, &se), err)
	}
	if err := recordPublished(ctx, p.led, p.spec, run, checked); err != nil {
		p.log.Warn("checks: store the published version's profile", "run", run.ID, "err", err)
	}
	return nil
}

// check evaluates the spec's checks; an accepted run is not checked again,
// its profile becomes the baseline.
func (p *publisher) check(ctx context.Context, run jobs.Run) (*checkOutcome, error) {
	if !p.accepted {
		return checkBeforePublish(ctx, p.led, p.spec, run, p.log)
	}
	cur, _, err := runProfile(ctx, p.led, p.spec, run.ID)
	if err != nil {
		p.log.Warn("checks: profile of the accepted run", "run", run.ID, "err", err)
		return nil, nil
	}
	return &checkOutcome{profile: cur.Encode()}, nil
}

// abort removes what the run staged from every sink (a run failed at
// publish).
func (p *publisher) abort(ctx context.Context) {
	for _, s := range p.snks {
		if err := s.Abort(context.WithoutCancel(ctx), p.info); err != nil {
			p.log.Warn("abort sink", "sink", s.Name(), "run", p.info.RunID, "err", err)
		}
	}
}

// publishStep is a cluster run's publish, run by the one worker holding its
// publish lease. It returns the terminal state to record, or "" when the
// run is not finished: lost shards were sent back to be recomputed, or a
// transient failure leaves the lease to lapse so that another worker
// retries.
func publishStep(ctx context.Context, p *publisher) (jobs.RunState, string) {
	run, err := p.led.Run(ctx, p.info.RunID)
	if err != nil {
		p.log.Warn("publish: read run", "run", p.info.RunID, "err", err)
		return "", ""
	}
	err = p.Publish(ctx, run)
	if err == nil {
		return jobs.RunSucceeded, ""
	}
	var pe *publishError
	errors.As(err, &pe)
	var lost *errLost
	switch {
	case errors.Is(err, ErrHeld):
		return jobs.RunHeld, pe.err.Error() // staged data kept for accept
	case errors.As(err, &lost):
		p.log.Warn("sinks lost committed shards; recomputing them before anything is published", "run", p.info.RunID, "shards", lost.shards, "causes", lost.causes)
		if err := p.led.Reopen(ctx, p.info.RunID, lost.shards, lost.Error()); err != nil {
			p.log.Warn("publish: reopen lost shards", "run", p.info.RunID, "err", err)
		}
		return "", ""
	case pe.final || pe.step == "stage" && retry.Classify(pe.err) == retry.Permanent:
		p.abort(ctx)
		if se := (*sinks.SupersededError)(nil); errors.As(err, &se) {
			return jobs.RunFailed, fmt.Sprintf("not published: %v", pe.err)
		}
		return jobs.RunFailed, fmt.Sprintf("nothing was published: %v", pe.err)
	}
	if pe.step == "lock" {
		p.log.Warn("publish: a sink target is locked; retrying later", "run", p.info.RunID, "err", pe.err)
	} else {
		p.log.Warn("publish: stopped; another attempt follows", "run", p.info.RunID, "step", pe.step, "err", pe.err)
	}
	return "", ""
}
