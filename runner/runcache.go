package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// openRun is a run made ready on this worker: its spec parsed from the
// ledger (secrets from this worker's environment), source, model and sinks
// open, sinks prepared.
type openRun struct {
	key  string
	job  *Job
	snks []sinks.Sink
	info sinks.RunInfo
	refs int
	used time.Time
	// ready closes once the run is open (err: or could not be); until
	// then other claim loops wait for it without holding the cache's lock.
	ready chan struct{}
	err   error
}

func (o *openRun) close() {
	for _, s := range o.snks {
		s.Close()
	}
	if o.job != nil {
		o.job.Close()
	}
}

// runCache keeps the runs a worker executes open across shards (sinks
// prepared, the model from models), least recently used first out, bounded.
type runCache struct {
	mu     sync.Mutex
	max    int
	runs   map[string]*openRun
	models *modelCache
	log    *slog.Logger
	// openSinks opens a run's sinks (OpenSinks; tests inject faults).
	openSinks func(context.Context, *jobs.Spec) ([]sinks.Sink, error)
}

func newRunCache(max int, models *modelCache, log *slog.Logger) *runCache {
	return &runCache{max: max, runs: map[string]*openRun{}, models: models, log: log, openSinks: OpenSinks}
}

// runKey names a run made ready on a device. It includes the run's
// generation (jobs.Run.Retries): a failed run's sinks may have been
// aborted (its run table dropped, its Redis version deleted), so a retried
// run prepares its sinks again (Prepare keeps what is still there) instead
// of writing to what was removed.
func runKey(run jobs.Run, device string) string {
	return fmt.Sprintf("%s|%d|%s", run.ID, run.Retries, device)
}

// open returns the run made ready for device; the caller releases it.
// The first claim loop to ask opens it (model load, sinks' Prepare: a
// sink that is down can take a transient window) without holding the
// cache's lock, so loops working on other runs go on; loops asking for
// the same run wait for that one open (or ctx).
func (c *runCache) open(ctx context.Context, run jobs.Run, device string) (*openRun, error) {
	key := runKey(run, device)
	c.mu.Lock()
	if o, ok := c.runs[key]; ok {
		o.refs++
		o.used = time.Now()
		c.mu.Unlock()
		select {
		case <-o.ready:
		case <-ctx.Done():
			c.release(o)
			return nil, ctx.Err()
		}
		if o.err != nil {
			c.release(o)
			return nil, o.err
		}
		return o, nil
	}
	o := &openRun{key: key, refs: 1, used: time.Now(), ready: make(chan struct{})}
	c.runs[key] = o
	c.mu.Unlock()
	opened, err := openRunFor(ctx, run, device, c.models.load, c.openSinks)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		o.err = err
		o.refs--
		delete(c.runs, key) // the next claim tries again
		close(o.ready)
		return nil, err
	}
	o.job, o.snks, o.info = opened.job, opened.snks, opened.info
	close(o.ready)
	c.evict()
	return o, nil
}

// release gives back a run open returned (nil is fine).
func (c *runCache) release(o *openRun) {
	if o == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o.refs--
	c.evict()
}

// evict closes least recently used runs nobody uses beyond the bound (a
// run being opened is in use by its opener).
func (c *runCache) evict() {
	evictLRU(c.runs, c.max, func(o *openRun) (time.Time, bool) { return o.used, o.refs == 0 }, (*openRun).close)
}

func (c *runCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, o := range c.runs {
		o.close()
		delete(c.runs, k)
	}
	c.models.closeAll()
}

// openRunFor parses the run's recorded spec with this worker's environment,
// opens its source, model (on device, from load) and sinks, checks that
// the model file here is the one the run was submitted with, and prepares
// the sinks.
func openRunFor(ctx context.Context, run jobs.Run, device string, load modelLoader, openSinks func(context.Context, *jobs.Spec) ([]sinks.Sink, error)) (*openRun, error) {
	if len(run.Spec) == 0 {
		return nil, fmt.Errorf("run %s recorded no job spec", run.ID)
	}
	spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("run %s: its job spec does not load here: %w", run.ID, err)
	}
	spec.Model.Device = device
	job, err := openJob(ctx, spec, load)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", run.ID, err)
	}
	o := &openRun{job: job}
	if v := job.Model.Version(); v != run.ModelVersion {
		o.close()
		return nil, fmt.Errorf("run %s: the model file %s here has version %s, but the run was submitted with %s: refusing its shards",
			run.ID, spec.Model.Path, v, run.ModelVersion)
	}
	if o.snks, err = openSinks(ctx, spec); err != nil {
		o.close()
		return nil, fmt.Errorf("run %s: %w", run.ID, err)
	}
	o.info = sinks.NewRunInfo(spec, run, job.Output)
	policy := policyOf(spec)
	for _, s := range o.snks {
		if err := policy.Do(ctx, func(ctx context.Context) error { return s.Prepare(ctx, o.info) }); err != nil {
			o.close()
			return nil, fmt.Errorf("run %s: sink %s: prepare: %w", run.ID, s.Name(), err)
		}
	}
	return o, nil
}

// policyOf is how transient store errors are retried (retry.transient_window).
func policyOf(spec *jobs.Spec) retry.Policy {
	if w := spec.Retry.TransientWindow.Duration; w > 0 {
		return retry.Policy{Window: w}
	}
	return retry.Policy{Window: -1}
}
