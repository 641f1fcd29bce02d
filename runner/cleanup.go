package runner

import (
	"context"
	"errors"
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

// cleaner finishes, in a worker, the sink cleanups of cancelled runs that
// the cancelling process could not do (ledger.Cleanups): the worker has
// the sinks' environment the dashboard or a laptop may lack. The zero
// value is ready.
type cleaner struct {
	mu     sync.Mutex
	failed map[string]time.Time // run id → last failure here
}

// finishCleanups cleans the sinks of the pool's cancelled runs whose
// cleanup is pending, and clears each record once its sinks are clean. A
// failure is logged and retried after cleanupRetry. Called when the
// worker finds nothing to claim.
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
		run, err := w.led.Run(ctx, id)
		if err == nil && run.State == jobs.RunCancelled {
			var cleaned []string
			cleaned, err = AbortSinks(ctx, run, AbortOptions{})
			if err == nil {
				w.log.Info("finished the sink cleanup of a cancelled run", "run", id, "sinks", cleaned)
			}
		}
		if err != nil {
			w.cleaner.fail(id)
			w.log.Warn("sink cleanup of a cancelled run failed; retrying later", "run", id, "in", cleanupRetry, "err", jobs.RedactSecrets(err.Error()))
			continue
		}
		if err := w.led.CleanupDone(ctx, id); err != nil {
			w.log.Warn("clear a finished sink cleanup", "run", id, "err", err)
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
