package runner

import (
	"context"
	"fmt"
)

// enforceRejectLimit fails a cluster run as soon as its rejected rows, as
// the ledger counts them over every committed shard, exceed
// max_rejected_fraction of its planned rows: as `precog run` does, the
// limit holds once that is certain, not after every shard ran. The run
// fails, its sinks are aborted and nothing is published; the other
// workers' attempts end at their next heartbeat. It reports whether the
// run was failed.
func (w *Worker) enforceRejectLimit(ctx context.Context, t shardTask) bool {
	runID := t.run.ID
	limit := t.job.Spec.MaxRejected()
	run, err := w.led.Run(ctx, runID)
	if err != nil || run.State.Terminal() {
		return false
	}
	shards, err := w.led.Shards(ctx, runID)
	if err != nil {
		w.log.Warn("reject limit: read the run's shards", "run", runID, "err", err)
		return false
	}
	var planned int64
	for _, s := range shards {
		planned += s.EstRows
	}
	if planned <= 0 || float64(run.Counts.Rejected) <= limit*float64(planned) {
		return false // unknown plan: the publish step checks against the rows read
	}
	cause := fmt.Errorf("%w: %d rejected so far, more than max_rejected_fraction %g of %d planned rows (see precog rejects %s)",
		ErrTooManyRejects, run.Counts.Rejected, limit, planned, runID)
	w.log.Warn("run failed: too many rejected rows", "run", runID, "rejected", run.Counts.Rejected, "planned_rows", planned)
	endRunFailed(ctx, w.led, t, cause, w.log)
	return true
}
