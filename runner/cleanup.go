package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// cleanupRetry is how long a worker waits before trying again a cleanup
// that failed in it (its other devices and workers may try meanwhile).
const cleanupRetry = 30 * time.Second

// cleanupBatch bounds the cleanups one idle moment of a worker takes on.
const cleanupBatch = 10

// cleanupLease is how long a claim on a cleanup (ledger.BeginCleanup)
// lasts: precog retry refuses the run meanwhile. The sinks' aborts run
// under cleanupAbortTimeout, well inside it, so a claim outlives the work
// it fences.
const (
	cleanupLease        = 10 * time.Minute
	cleanupAbortTimeout = 8 * time.Minute
)

// cleaner finishes, in a worker, the pending sink cleanups of its pool
// (ledger.Cleanups): those of cancelled runs that the cancelling process
// could not do (the worker has the sinks' environment the dashboard or a
// laptop may lack), and those of failed runs whose staged data was kept
// for retry.keep_failed. The zero value is ready.
type cleaner struct {
	mu     sync.Mutex
	failed map[string]time.Time // run id → last failure here
}

// finishCleanups cleans the sinks of the pool's runs whose cleanup is due,
// each under a claim (ledger.BeginCleanup) that fences precog retry, and
// clears each record once its sinks are clean. A failure is logged and
// retried after cleanupRetry. Called when the worker finds nothing to
// claim.
func (w *Worker) finishCleanups(ctx context.Context) {
	ids, err := w.led.CleanupsDue(ctx, w.opts.Pool, cleanupBatch)
	if errors.Is(err, ledger.ErrUnsupported) {
		return
	}
	if err != nil {
		w.log.Warn("list the pending sink cleanups", "err", err)
		return
	}
	for _, id := range ids {
		if !w.cleaner.due(id) {
			continue
		}
		if err := cleanRun(ctx, w.led, id, w.opts.ID, w.log); err != nil {
			w.cleaner.fail(id)
			w.log.Warn("sink cleanup of a finished run failed; retrying later", "run", id, "in", cleanupRetry, "err", jobs.RedactSecrets(err.Error()))
		}
	}
}

// cleanRun claims runID's due cleanup for holder, removes the run's data
// from every sink and clears the record. A cleanup claimed by another
// holder, or gone (done, or the run was retried), is nothing to do.
func cleanRun(ctx context.Context, led ledger.Store, runID, holder string, log *slog.Logger) error {
	switch err := led.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: runID, Holder: holder, Lease: cleanupLease}); {
	case errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrCleaning):
		return nil
	case err != nil:
		return err
	}
	run, err := led.Run(ctx, runID)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, cleanupAbortTimeout)
	defer cancel()
	cleaned, err := AbortSinks(actx, run, AbortOptions{})
	if err != nil {
		releaseCleanup(ctx, led, runID, err, log)
		return err
	}
	err = led.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: runID, Holder: holder})
	if errors.Is(err, ledger.ErrLeaseLost) {
		// The claim ran out and the run was retried (or another holder
		// took over): the retry's publish finds what the sinks lost and
		// recomputes it.
		log.Warn("finished a sink cleanup after its claim ended", "run", runID, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	log.Info("finished the sink cleanup of a "+string(run.State)+" run", "run", runID, "sinks", cleaned)
	return nil
}

// releaseCleanup ends a claim whose cleanup failed (cause), recording the
// cleanup again as due now: precog retry need not wait for the claim's
// lease, and another worker may try.
func releaseCleanup(ctx context.Context, led ledger.Cleanups, runID string, cause error, log *slog.Logger) {
	err := led.AddCleanup(context.WithoutCancel(ctx), ledger.CleanupParams{RunID: runID, Reason: jobs.RedactSecrets(cause.Error())})
	if err != nil {
		log.Warn("release the claim on a failed sink cleanup (it lapses with its lease)", "run", runID, "err", err)
	}
}

// endRunAfter fails a cluster run after one of its shards failed for good
// (r, because of cause): a shard out of attempts leaves the staged data
// good for a retry of the same run, which keeps it (endRunKept); a
// permanent error (bad data, a model that fails, a full disk) would fail
// the same way again, and removes it at once (endRunFailed).
func endRunAfter(ctx context.Context, led ledger.Store, t shardTask, r attemptResult, cause error, log *slog.Logger) {
	if r.outcome == outPermanent {
		endRunFailed(ctx, led, t, cause, log)
		return
	}
	endRunKept(ctx, led, t, cause, log)
}

// endRunKept fails a cluster run and keeps what it wrote to its sinks for
// the spec's retry.keep_failed: the ledger records the cleanup due then,
// which a worker of the pool does unless `precog retry` took the run back
// up before (RetryRun deletes the record). With no window, or when the
// record cannot be written, the sinks are aborted at once as before.
func endRunKept(ctx context.Context, led ledger.Store, t shardTask, cause error, log *slog.Logger) {
	keep := t.job.Spec.Retry.KeepFailed.Duration
	if keep <= 0 {
		endRunFailed(ctx, led, t, cause, log)
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	id := t.info.RunID
	err := led.SetRunState(lctx, id, jobs.RunFailed, cause.Error())
	if err != nil {
		// Ended meanwhile (cancelled: the cancel cleans; failed by another
		// worker: it decided), or not recorded: the run is not this
		// worker's to clean.
		log.Warn("mark run failed", "run", id, "err", err)
		return
	}
	runFinished(t.info.Job, jobs.RunFailed)
	err = led.AddCleanup(lctx, ledger.CleanupParams{RunID: id, Reason: fmt.Sprintf("failed; staged data kept for retry.keep_failed %s", keep), DueIn: keep})
	switch {
	case err == nil:
		log.Warn("run failed; its staged data is kept for a retry", "run", id, "keep_failed", keep, "retry", "precog retry "+id)
	case errors.Is(err, ledger.ErrRunOpen):
		// precog retry took it back up already: the data is in use.
	default:
		log.Warn("record the kept staged data of the failed run; removing it now", "run", id, "err", err)
		for _, s := range t.snks {
			if err := s.Abort(lctx, t.info); err != nil {
				log.Warn("abort sink", "sink", s.Name(), "run", id, "err", err)
			}
		}
	}
}

// due reports whether a cleanup of id may be tried now.
func (c *cleaner) due(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.failed[id]
	return !ok || time.Since(at) >= cleanupRetry
}

// fail records a failed cleanup of id.
func (c *cleaner) fail(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = map[string]time.Time{}
	}
	for k, at := range c.failed { // bounded: forget old failures
		if time.Since(at) >= cleanupRetry {
			delete(c.failed, k)
		}
	}
	c.failed[id] = time.Now()
}
