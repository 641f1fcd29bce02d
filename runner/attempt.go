package runner

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks"
)

// DefaultStallTimeout is how long a shard attempt may make no progress
// (no rows read) while its heartbeats continue before it is failed and
// retried: a hung read or model must not hold a run at 99%.
const DefaultStallTimeout = 10 * time.Minute

// attempt is one shard attempt under a lease: what runAttempt needs.
type attempt struct {
	led    ledger.Ledger
	job    *Job
	snks   []sinks.Sink
	info   sinks.RunInfo
	run    jobs.Run
	shard  jobs.Shard
	worker string
	// lease is renewed every lease/3 (and at once on kick).
	lease time.Duration
	// stall fails the attempt when no row was read for this long.
	stall time.Duration
	// rejectsDir receives reject files ("": none); keepRejects bounds the
	// rejects kept in memory for the ledger's commit.
	rejectsDir  string
	keepRejects int
	stats       *StageStats
	onRows      func(int64)
	// kick, when it receives, makes the heartbeat run at once (a cancel
	// notice: learn within a moment that the run was cancelled).
	kick <-chan struct{}
	// cost, when set, receives what the attempt used (costMeter).
	cost *jobs.Cost
}

// errStalled: the attempt made no progress for the stall timeout.
var errStalled = errors.New("no progress")

// runAttempt executes one shard attempt while heartbeating its lease and
// watching its progress. A lost lease (another worker took the shard over,
// or the run was cancelled) or a stall cancels the attempt before it can
// commit. It returns the attempt's counts and its rejects (up to
// keepRejects) to commit with them (Ledger.Complete).
// The profile it returns (the spec's checks:, "" without) goes into the
// ledger with the shard's commit, in the same transaction.
func runAttempt(ctx context.Context, a attempt) (jobs.Counts, []jobs.Reject, string, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lastRows atomic.Int64
	lastRows.Store(time.Now().UnixNano())
	go a.keepAlive(sctx, cancel, &lastRows)
	rejects := newRejectFile(a.rejectsDir, a.shard.Index, a.keepRejects)
	onRows := func(n int64) {
		lastRows.Store(time.Now().UnixNano())
		if a.onRows != nil {
			a.onRows(n)
		}
	}
	// The run's planned rows, as this shard's times the shards: the cap
	// leaves room for 8 times the sample, so a shard up to 8 times the
	// average still keeps every key the run's sample can take.
	prof := newProfileBuilder(a.job.Spec, a.shard.EstRows*int64(a.run.Shards))
	beforeCommit := func(ctx context.Context) error {
		if err := a.led.Heartbeat(ctx, ledger.HeartbeatParams{RunID: a.run.ID, Shard: a.shard.Index, Worker: a.worker, Lease: a.lease}); err != nil {
			return fmt.Errorf("shard %d: lease check before commit: %w", a.shard.Index, err)
		}
		return nil
	}
	meter := costs.begin(a.job.Spec.Model.Device)
	counts, err := a.job.ExecShard(sctx, ShardTask{Run: a.info, Shard: a.shard, Sinks: a.snks, Rejects: rejects,
		ComputedAt: a.run.CreatedAt, OnRows: onRows, Stats: a.stats, BeforeCommit: beforeCommit, Profile: prof})
	if c := costs.end(meter, counts.RowsOut); a.cost != nil {
		*a.cost = c
	}
	// An attempt the watchdog stopped (lease lost, run cancelled, stall)
	// fails with whatever the cancellation broke (often a bare "context
	// canceled"): report the cause, so that the caller tells a lost lease
	// from a failure instead of recording a failed attempt. An interrupt
	// (ctx itself ended) that came after every sink committed is not a
	// failure: the shard is done and the caller records it, or a resume
	// would compute it again.
	if sctx.Err() != nil && ctx.Err() == nil {
		err = context.Cause(sctx)
	}
	if err != nil {
		rejects.abort()
		return counts, nil, "", fmt.Errorf("shard %d: %w", a.shard.Index, err)
	}
	if err := rejects.commit(); err != nil {
		return counts, nil, "", fmt.Errorf("shard %d: rejects: %w", a.shard.Index, err)
	}
	var profile string
	if prof != nil {
		profile = prof.Profile().Encode()
	}
	return counts, rejects.sample, profile, nil
}

// keepAlive heartbeats the lease and runs the stall watchdog until ctx ends.
func (a attempt) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, lastRows *atomic.Int64) {
	t := time.NewTicker(a.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.kick:
		}
		if err := a.led.Heartbeat(ctx, ledger.HeartbeatParams{RunID: a.run.ID, Shard: a.shard.Index, Worker: a.worker, Lease: a.lease}); err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("shard %d: heartbeat: %w", a.shard.Index, err))
			return
		}
		if idle := time.Since(time.Unix(0, lastRows.Load())); a.stall > 0 && idle > a.stall {
			cancel(fmt.Errorf("shard %d: %w for %s (stall_timeout); the attempt is abandoned and retried", a.shard.Index, errStalled, idle.Round(time.Second)))
			return
		}
	}
}
