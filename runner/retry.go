package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
)

// RetryParams name the run to retry and who executes its shards.
type RetryParams struct {
	// Ledger holds Run.
	Ledger ledger.Store
	// Run is the run to retry, as read from Ledger.
	Run jobs.Run
	// Cluster: Ledger is the pool's (Postgres). The failed shards, or the
	// whole failed run, go back to the pool's workers. Otherwise it is the
	// embedded ledger of a state directory.
	Cluster bool
	// Force retries a cluster run although a newer run of its job and
	// params succeeded.
	Force bool
	// Resume (embedded ledger) resumes the run on this machine with the
	// spec it recorded, as precog run would: RunLocal with these options
	// retries its failed shards and finishes it. Without it the failed
	// shards only go back to pending for the next precog run of the job.
	Resume *LocalOptions
}

// RetryResult is what a retry did.
type RetryResult struct {
	Run     jobs.Run
	Cluster bool
	// Reopened counts the failed shards put back to pending.
	Reopened int
	// AllCommitted: a failed cluster run reopened with every shard
	// committed (it failed at publish; a worker publishes it again).
	AllCommitted bool
	// Kept: the failed cluster run's staged data was still kept
	// (retry.keep_failed): its committed shards are not recomputed.
	// Removed: it was removed (at the failure, or once the window
	// passed): the shards its sinks lost are recomputed. Neither: the
	// ledger keeps no record of it.
	Kept, Removed bool
	// Resumed is the local run's result (RetryParams.Resume).
	Resumed *Result
}

// Retry reruns a run's failed shards, keeping its committed ones: on the
// Postgres ledger they (or a failed run) go back to the pool's workers; on
// the embedded ledger the run is resumed here (p.Resume) or its failed
// shards wait for the next precog run. A run that cannot be retried (a
// cancelled or succeeded run, one superseded by a newer succeeded run, a
// recorded spec that does not load here) is a *RefusedError.
func Retry(ctx context.Context, p RetryParams) (RetryResult, error) {
	res := RetryResult{Run: p.Run, Cluster: p.Cluster}
	switch {
	case p.Cluster:
		if !p.Force {
			if err := refuseSuperseded(ctx, p.Ledger, p.Run); err != nil {
				return res, err
			}
		}
		return retryCluster(ctx, p.Ledger, res)
	case p.Resume != nil:
		return resumeLocal(ctx, p, res)
	}
	r := p.Run
	if r.State.Terminal() {
		return res, refused(fmt.Errorf("run %s is %s: the embedded ledger cannot reopen it; start a new run with:\n  %s", r.ID, r.State, CommandLine(r.Params, "run", r.SpecFile)))
	}
	n, err := p.Ledger.RetryFailed(ctx, r.ID)
	if errors.Is(err, ledger.ErrRunFinished) {
		return res, fmt.Errorf("run %s finished meanwhile: %w", r.ID, err)
	}
	res.Reopened = n
	return res, err
}

// String says what the retry did and who executes the shards now.
func (r RetryResult) String() string {
	pool := runview.FromAt(r.Run, nil, time.Now()).Pool
	switch {
	case !r.Cluster:
		return fmt.Sprintf("run %s: %d failed shard(s) back to pending; the next precog run of the job (or precog retry %s) executes them", r.Run.ID, r.Reopened, r.Run.ID)
	case r.Reopened == 0 && r.Run.State == jobs.RunFailed && r.AllCommitted:
		return fmt.Sprintf("run %s failed at publish with every shard committed: it is back to running, and a worker of the %s pool publishes it again", r.Run.ID, pool)
	case r.Reopened == 0 && r.Run.State == jobs.RunFailed:
		return fmt.Sprintf("run %s is back to running; the %s pool's workers pick up its remaining shards%s", r.Run.ID, pool, r.stagedNote())
	case r.Reopened == 0:
		return fmt.Sprintf("run %s (%s) has no failed shards: nothing to retry", r.Run.ID, r.Run.State)
	}
	return fmt.Sprintf("run %s: %d failed shard(s) back to pending; the %s pool's workers pick them up%s", r.Run.ID, r.Reopened, pool, r.stagedNote())
}

// stagedNote says what became of a failed cluster run's staged data.
func (r RetryResult) stagedNote() string {
	switch {
	case r.Kept:
		return " (its staged data was kept: committed shards are not recomputed)"
	case r.Removed:
		return " (its staged data was removed: the shards its sinks lost are recomputed)"
	}
	return ""
}

// refuseSuperseded refuses when a run of r's job and params created after
// r has succeeded: retrying r would compute results older than what
// readers see, and its publish would try to move them back.
func refuseSuperseded(ctx context.Context, led ledger.Ledger, r jobs.Run) error {
	o, err := SupersededBy(ctx, led, r)
	if err != nil || o.ID == "" {
		return err
	}
	return refused(fmt.Errorf("run %s is superseded: the newer run %s of %s (same params) succeeded, and readers see its results; retrying %s would try to move them back. Submit a new run instead, or pass --force",
		r.ID, o.ID, r.Job, r.ID))
}

// SupersededBy is the run of r's job and params created after r that
// succeeded (zero when none): reopening r would compute results older than
// what readers see.
func SupersededBy(ctx context.Context, led ledger.Ledger, r jobs.Run) (jobs.Run, error) {
	runs, err := led.Runs(ctx, r.Job, 0)
	if err != nil {
		return jobs.Run{}, err
	}
	for _, o := range runs { // newest first
		if o.ID == r.ID || !o.CreatedAt.After(r.CreatedAt) {
			break
		}
		if o.ParamsKey == r.ParamsKey && o.State == jobs.RunSucceeded {
			return o, nil
		}
	}
	return jobs.Run{}, nil
}

// retryCluster puts a cluster run's failed shards back to pending, or
// reopens a failed run.
func retryCluster(ctx context.Context, led ledger.Store, res RetryResult) (RetryResult, error) {
	r := res.Run
	var err error
	switch {
	case !r.State.Terminal():
		res.Reopened, err = led.RetryFailed(ctx, r.ID)
	case r.State == jobs.RunFailed:
		res.Kept, res.Removed = stagedKept(ctx, led, r)
		res.Reopened, err = led.RetryRun(ctx, r.ID)
		if errors.Is(err, ledger.ErrCleaning) {
			return res, refused(fmt.Errorf("run %s: %w; retry it once that is done (the retry then recomputes the shards its sinks lost)", r.ID, err))
		}
		if errors.Is(err, ledger.ErrUnsupported) {
			return res, fmt.Errorf("run %s failed and this ledger cannot reopen a failed run yet; submit it again (a new run, every shard recomputed) with:\n  %s",
				r.ID, CommandLine(r.Params, "submit", r.SpecFile))
		}
	case r.State == jobs.RunCancelled:
		return res, refused(fmt.Errorf("run %s is cancelled: nothing to retry (a cancel removed its data); submit it again, a new run, with:\n  %s",
			r.ID, CommandLine(r.Params, "submit", r.SpecFile)))
	default:
		return res, refused(fmt.Errorf("run %s is %s: nothing to retry", r.ID, r.State))
	}
	var open *ledger.OpenRunError
	switch {
	case errors.As(err, &open):
		return res, refused(open)
	case errors.Is(err, ledger.ErrRunFinished):
		return res, refused(fmt.Errorf("run %s finished meanwhile: nothing to retry: %w", r.ID, err))
	case err != nil:
		return res, err
	case res.Reopened == 0 && r.State == jobs.RunFailed:
		shards, serr := led.Shards(ctx, r.ID)
		res.AllCommitted = serr == nil && allCommitted(shards)
	}
	return res, nil
}

// stagedKept reports whether failed cluster run r's staged data is kept
// for a retry (a pending cleanup), or was removed (none: every failed
// cluster run's sinks are aborted, at once or once retry.keep_failed
// passed). Neither when the ledger cannot tell.
func stagedKept(ctx context.Context, led ledger.Cleanups, r jobs.Run) (kept, removed bool) {
	_, err := led.PendingCleanup(ctx, r.ID)
	return err == nil, errors.Is(err, ledger.ErrNotFound)
}

// allCommitted reports whether every shard is committed.
func allCommitted(shards []jobs.Shard) bool {
	for _, s := range shards {
		if s.State != jobs.ShardCommitted {
			return false
		}
	}
	return len(shards) > 0
}

// resumeLocal resumes an open run of the embedded ledger from the spec it
// recorded: RunLocal retries its failed shards and finishes it.
func resumeLocal(ctx context.Context, p RetryParams, res RetryResult) (RetryResult, error) {
	r := p.Run
	if r.State.Terminal() {
		msg := fmt.Sprintf("run %s is %s: nothing to retry", r.ID, r.State)
		if (r.State == jobs.RunFailed || r.State == jobs.RunCancelled) && r.SpecFile != "" {
			msg += "; start a new run with:\n  " + CommandLine(r.Params, "run", r.SpecFile)
		}
		return res, refused(errors.New(msg))
	}
	if len(r.Spec) == 0 {
		return res, refused(fmt.Errorf("run %s recorded no spec (made by an older precog): rerun its job with precog run and the same --param values", r.ID))
	}
	spec, err := jobs.Parse(r.Spec, r.SpecFile, r.Params, os.LookupEnv)
	if err != nil {
		return res, refused(fmt.Errorf("run %s: its recorded spec (%s): %w", r.ID, r.SpecFile, err))
	}
	if p.Resume.Parallel < 1 {
		return res, refused(fmt.Errorf("--parallel: must be >= 1 (got %d)", p.Resume.Parallel))
	}
	out, err := RunLocal(ctx, spec, *p.Resume)
	if err != nil {
		return res, err
	}
	if out.Run.ID != r.ID && p.Resume.Logger != nil {
		p.Resume.Logger.Warn("the run retried is not the one named", "named", r.ID, "ran", out.Run.ID)
	}
	res.Resumed = &out
	return res, nil
}

// CommandLine is a command for people to copy: "precog" then args quoted
// for a POSIX shell, then one --param per run parameter, sorted.
func CommandLine(params map[string]string, args ...string) string {
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		args = append(args, "--param", k+"="+params[k])
	}
	return shellJoin(append([]string{"precog"}, args...))
}
