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

// lockAll takes every sink's writer lock, each a lease of lease (0: the
// sinks' default): a cluster publisher passes its ledger lease, so that
// once it freezes its targets lapse with its publish step and another
// worker takes both over. The returned context is cancelled when any lock
// is lost; release gives every lock back.
func lockAll(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo, lease time.Duration) (context.Context, func(), error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var held []sinks.Lock
	release := func() {
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		defer rcancel()
		for _, l := range held {
			_ = l.Release(rctx)
		}
	}
	holder := sinks.ThisProcess(info)
	holder.Lease = lease
	for _, s := range snks {
		l, err := s.Lock(ctx, info, holder)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("sink %s: %w", s.Name(), err)
		}
		held = append(held, l)
		go func(name string) {
			select {
			case <-l.Lost():
				cancel(fmt.Errorf("sink %s: writer lock lost; stopped writing so that another writer's data is not overwritten", name))
			case <-ctx.Done():
			}
		}(s.Name())
	}
	return ctx, release, nil
}

// publishLeaser is the ledger's publish lease, checked before each sink.
type publishLeaser interface {
	HeartbeatPublish(ctx context.Context, runID, worker string, lease time.Duration) error
}

// publishDeps is what the cluster publish step needs.
type publishDeps struct {
	led ledger.Ledger
	// lease, worker and leaseFor renew and check the publish lease before
	// each sink's Publish (nil lease: no check).
	lease    publishLeaser
	worker   string
	leaseFor time.Duration
	snks     []sinks.Sink
	info     sinks.RunInfo
	spec     *jobs.Spec
	log      *slog.Logger
}

// publishStep is a cluster run's publish, run by the one worker holding its
// publish lease: the sinks' locks, the reject limit over the whole run,
// phase one on every sink, then phase two. It returns the terminal state to
// record, or "" when the run is not finished: lost shards were sent back to
// be recomputed, or a transient failure leaves the lease to lapse so that
// another worker retries.
func publishStep(ctx context.Context, d publishDeps) (jobs.RunState, string) {
	policy := policyOf(d.spec)
	fail := func(err error) (jobs.RunState, string) {
		msg := fmt.Sprintf("nothing was published: %v", err)
		if se := (*sinks.SupersededError)(nil); errors.As(err, &se) {
			msg = fmt.Sprintf("not published: %v", err)
		}
		for _, s := range d.snks {
			if aerr := s.Abort(context.WithoutCancel(ctx), d.info); aerr != nil {
				d.log.Warn("abort sink", "sink", s.Name(), "run", d.info.RunID, "err", aerr)
			}
		}
		return jobs.RunFailed, msg
	}
	run, err := d.led.Run(ctx, d.info.RunID)
	if err != nil {
		d.log.Warn("publish: read run", "run", d.info.RunID, "err", err)
		return "", ""
	}
	if max := d.spec.MaxRejected(); float64(run.Counts.Rejected) > max*float64(run.Counts.RowsIn) {
		return fail(fmt.Errorf("%w: %d of %d rows rejected, more than max_rejected_fraction %g", ErrTooManyRejects, run.Counts.Rejected, run.Counts.RowsIn, max))
	}
	lctx, unlock, err := lockAll(ctx, d.snks, d.info, d.leaseFor)
	if err != nil {
		d.log.Warn("publish: a sink target is locked; retrying later", "run", d.info.RunID, "err", err)
		return "", ""
	}
	defer unlock()
	err = stageAll(lctx, d.led, d.snks, d.info, policy)
	var lost *errLost
	switch {
	case errors.As(err, &lost):
		d.log.Warn("sinks lost committed shards; recomputing them before anything is published", "run", d.info.RunID, "shards", lost.shards, "causes", lost.causes)
		if err := d.led.Reopen(ctx, d.info.RunID, lost.shards, lost.Error()); err != nil {
			d.log.Warn("publish: reopen lost shards", "run", d.info.RunID, "err", err)
		}
		return "", ""
	case errors.Is(err, ErrDuplicateKeys) || retry.Classify(err) == retry.Permanent:
		return fail(err)
	case err != nil:
		d.log.Warn("publish: stage failed; another attempt follows", "run", d.info.RunID, "err", err)
		return "", ""
	}
	checked, err := checkBeforePublish(lctx, d.led, d.spec, run, d.log)
	switch {
	case errors.Is(err, ErrHeld):
		return jobs.RunHeld, err.Error() // staged data kept for accept
	case errors.Is(err, ErrChecksFailed):
		return fail(err)
	case err != nil:
		d.log.Warn("publish: checks could not be evaluated; another attempt follows", "run", d.info.RunID, "err", err)
		return "", ""
	}
	var before func(context.Context) error
	if d.lease != nil {
		before = func(ctx context.Context) error {
			return d.lease.HeartbeatPublish(ctx, d.info.RunID, d.worker, d.leaseFor)
		}
	}
	if err := publishAll(lctx, d.snks, d.info, policy, d.log, before); err != nil {
		if se := (*sinks.SupersededError)(nil); errors.As(err, &se) {
			// A later run of the target published meanwhile (this run is an
			// old one retried, or its publisher froze): publishing it would
			// move readers back. Its unpublished data goes; a sink that
			// published it already keeps it (Abort refuses a published
			// version), and the rest stay on the later version.
			return fail(err)
		}
		d.log.Warn("publish failed; another attempt follows", "run", d.info.RunID, "err", err)
		return "", ""
	}
	if err := recordPublished(lctx, d.led, d.spec, run, checked); err != nil {
		d.log.Warn("checks: store the published version's profile", "run", d.info.RunID, "err", err)
	}
	return jobs.RunSucceeded, ""
}
