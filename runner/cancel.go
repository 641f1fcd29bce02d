package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/sinks"
)

// ErrNotCancellable means the run already finished.
var ErrNotCancellable = errors.New("run already finished")

// CancelOptions tune Cancel.
type CancelOptions struct {
	// Drain bounds the wait for the workers holding shards of the run to
	// stop before its sinks are cleaned (a shared ledger); 0 waits for none.
	Drain time.Duration
	// CleanAgain cleans the sinks of a run that is cancelled already,
	// instead of refusing it with ErrNotCancellable.
	CleanAgain bool
	// Reason is recorded as the run's error (default "cancelled by precog
	// cancel").
	Reason string
	// ScanUnindexed lets a Redis sink delete a version that has no key
	// record (written by a precog older than key records) with a SCAN of
	// the whole keyspace; without it such a version is left to its TTL.
	ScanUnindexed bool
	Log           *slog.Logger
}

func (o CancelOptions) withDefaults() CancelOptions {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Reason == "" {
		o.Reason = "cancelled by precog cancel"
	}
	return o
}

// CancelResult is what Cancel did.
type CancelResult struct {
	Run jobs.Run
	// Again is set when the run was cancelled already: only its sinks were
	// cleaned again.
	Again bool
	// NoSpec is set when the run recorded no spec (an older precog made
	// it): its sinks were not cleaned.
	NoSpec bool
	// Cleaned names the sinks the run's unpublished data was removed from.
	Cleaned []string
	// Dropped is set when the run had failed with its staged data kept
	// for a retry (retry.keep_failed): that data was removed now, and the
	// run stays failed.
	Dropped bool
}

// drainPoll is how often Cancel looks for the holders of a cancelled run's
// shards: each holder clears its lease mark as it stops (Release), so
// Cancel goes on within a poll of the last one stopping.
const drainPoll = 200 * time.Millisecond

// Cancel stops an unfinished run, on either ledger: the ledger marks it
// cancelled (refusing a run in its publish step with ledger.ErrPublishing,
// so no cancel lands between two sinks), the workers holding its shards
// are given o.Drain to stop, and everything it wrote is removed from every
// sink of the spec it recorded (expanded with this process's environment,
// so secrets never sit in the ledger). Published data is never touched.
func Cancel(ctx context.Context, led ledger.Store, id string, o CancelOptions) (CancelResult, error) {
	o = o.withDefaults()
	run, err := led.Run(ctx, id)
	if err != nil {
		return CancelResult{}, fmt.Errorf("run %s: %w", id, err)
	}
	res := CancelResult{Run: run}
	switch {
	case run.State == jobs.RunCancelled && o.CleanAgain:
		res.Again = true
	case run.State == jobs.RunFailed:
		return dropKept(ctx, led, res, o)
	case run.State.Terminal():
		return res, fmt.Errorf("run %s is %s: %w", id, run.State, ErrNotCancellable)
	default:
		err := led.SetRunState(ctx, id, jobs.RunCancelled, o.Reason)
		if errors.Is(err, ledger.ErrRunFinished) {
			res.Run, _ = led.Run(ctx, id)
			return res, fmt.Errorf("run %s finished meanwhile (%s): %w", id, res.Run.State, ErrNotCancellable)
		}
		if err != nil {
			return res, err
		}
		runFinished(run.Job, jobs.RunCancelled)
	}
	if o.Drain > 0 {
		if err := drainLeases(ctx, led, id, o); err != nil {
			return res, err
		}
	}
	if len(run.Spec) == 0 {
		o.Log.Warn("the run recorded no spec (made by an older precog): its sinks were not cleaned", "run", id)
		res.NoSpec = true
	} else if res.Cleaned, err = AbortSinks(ctx, run, AbortOptions{ScanUnindexed: o.ScanUnindexed}); err != nil {
		res.Run, _ = led.Run(ctx, id)
		return res, cleanupPending(ctx, led, run, err, o.Log)
	} else if err := led.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: id}); err != nil && !errors.Is(err, ledger.ErrUnsupported) {
		o.Log.Warn("the run's sinks are clean, but its pending-cleanup record stays (a worker cleans them again)", "run", id, "err", err)
	}
	res.Run, err = led.Run(ctx, id)
	return res, err
}

// dropKept is Cancel of a failed cluster run whose staged data is kept
// for a retry (a pending cleanup): the cleanup is made due now and done
// here, under a claim that fences precog retry; the run stays failed. A
// failed run with nothing kept is ErrNotCancellable, as before.
func dropKept(ctx context.Context, led ledger.Store, res CancelResult, o CancelOptions) (CancelResult, error) {
	id := res.Run.ID
	notKept := fmt.Errorf("run %s is %s (its staged data is not kept for a retry): %w", id, res.Run.State, ErrNotCancellable)
	if _, err := led.PendingCleanup(ctx, id); errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrUnsupported) {
		return res, notKept
	} else if err != nil {
		return res, err
	}
	err := led.AddCleanup(ctx, ledger.CleanupParams{RunID: id, Reason: o.Reason})
	if errors.Is(err, ledger.ErrRunOpen) {
		return res, fmt.Errorf("run %s was retried meanwhile: %w", id, ErrNotCancellable)
	} else if err != nil {
		return res, err
	}
	holder := fmt.Sprintf("precog cancel (pid %d)", os.Getpid())
	switch err := led.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: id, Holder: holder, Lease: cleanupLease}); {
	case errors.Is(err, ledger.ErrCleaning):
		// A worker of the pool took the cleanup (due now) first: the data
		// goes all the same; wait for it, bounded by the claim's lease.
		if waitCleanupGone(ctx, led, id, cleanupLease) {
			res.Dropped = true
			return res, nil
		}
		return res, fmt.Errorf("run %s: a worker is removing its staged data now: %w", id, ErrNotCancellable)
	case errors.Is(err, ledger.ErrNotFound):
		return res, notKept
	case err != nil:
		return res, err
	}
	actx, cancel := context.WithTimeout(ctx, cleanupAbortTimeout)
	defer cancel()
	if res.Cleaned, err = AbortSinks(actx, res.Run, AbortOptions{ScanUnindexed: o.ScanUnindexed}); err != nil {
		releaseCleanup(ctx, led, id, err, o.Log)
		return res, fmt.Errorf("run %s: removing its kept staged data: %w (the cleanup is due now: a worker of pool %s finishes it)", id, err, jobs.PoolOrDefault(res.Run.Pool))
	}
	if err := led.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: id, Holder: holder}); err != nil {
		o.Log.Warn("the run's sinks are clean, but its pending-cleanup record stays (a worker cleans them again)", "run", id, "err", err)
	}
	res.Dropped = true
	return res, nil
}

// CleanupPendingError means the run is cancelled but its sinks still hold
// its unpublished data: this process could not clean them (Err says why:
// a variable of the spec unset here, a sink down). Recorded is set when
// the ledger recorded the pending cleanup for the pool's workers, which
// have the sinks' environment and finish it.
type CleanupPendingError struct {
	Run      jobs.Run
	Err      error
	Recorded bool
}

func (e *CleanupPendingError) Error() string {
	then := fmt.Sprintf("run precog cancel %s again where the sinks' environment is set", e.Run.ID)
	if e.Recorded {
		then = fmt.Sprintf("a worker of pool %s finishes it, or %s", jobs.PoolOrDefault(e.Run.Pool), then)
	}
	return fmt.Sprintf("run %s cancelled; sink cleanup pending: %v (%s)", e.Run.ID, e.Err, then)
}

func (e *CleanupPendingError) Unwrap() error { return e.Err }

// cleanupPending records, where the ledger can, that the cancelled run's
// sinks still hold its data, and returns the *CleanupPendingError.
func cleanupPending(ctx context.Context, led ledger.Store, run jobs.Run, cause error, log *slog.Logger) error {
	pe := &CleanupPendingError{Run: run, Err: cause}
	switch err := led.AddCleanup(ctx, ledger.CleanupParams{RunID: run.ID, Reason: jobs.RedactSecrets(cause.Error())}); {
	case errors.Is(err, ledger.ErrUnsupported):
	case err != nil:
		log.Warn("could not record the pending sink cleanup for the workers", "run", run.ID, "err", err)
	default:
		pe.Recorded = true
	}
	log.Warn("run cancelled; its sinks still hold its data", "run", run.ID, "err", jobs.RedactSecrets(cause.Error()), "for_workers", pe.Recorded)
	return pe
}

// drainLeases waits, at most o.Drain, until no worker holds a live lease
// on a shard of the cancelled run: the cancel ended its shards, and each
// one's lease mark stays until its holder stops (or its lease runs out,
// when it died). Leases are on the ledger's clock: the run's updated_at
// (the cancel, stamped by the ledger) anchors it.
func drainLeases(ctx context.Context, led ledger.Ledger, id string, o CancelOptions) error {
	run, err := led.Run(ctx, id)
	if err != nil {
		return err
	}
	anchor, start := run.UpdatedAt, time.Now()
	deadline := start.Add(o.Drain)
	told := false
	for {
		shards, err := led.Shards(ctx, id)
		if err != nil {
			return err
		}
		ledgerNow := anchor.Add(time.Since(start))
		held := 0
		for _, s := range shards {
			if (s.State == jobs.ShardRunning || s.State == jobs.ShardFailed) && s.LeaseUntil.After(ledgerNow) {
				held++
			}
		}
		if held == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			o.Log.Warn("workers still hold shards of the cancelled run; cleaning its sinks anyway (run cancel again later to clean what they write meanwhile)",
				"run", id, "shards", held, "waited", o.Drain)
			return nil
		}
		if !told {
			o.Log.Info("waiting for the workers holding shards of the run to stop", "run", id, "shards", held, "at_most", o.Drain)
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// AbortOptions tune AbortSinks.
type AbortOptions struct {
	// ScanUnindexed: see CancelOptions.
	ScanUnindexed bool
}

// unindexedScanner is a sink that can delete versions it kept no record
// of by scanning its store (the Redis sink).
type unindexedScanner interface{ ScanUnindexed(on bool) }

// AbortSinks removes an unpublished run's data from every sink of the spec
// it recorded, expanded with this process's environment, and names the
// sinks it cleaned. A sink that fails is reported; the others are cleaned.
// Each sink's cost is in proportion to what the run wrote to it.
func AbortSinks(ctx context.Context, run jobs.Run, o AbortOptions) ([]string, error) {
	spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("run %s: its recorded spec (%s): %w", run.ID, run.SpecFile, err)
	}
	snks, err := OpenSinks(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("run %s: open its sinks to clean them: %w", run.ID, err)
	}
	defer func() {
		for _, s := range snks {
			s.Close()
		}
	}()
	info := sinks.NewRunInfo(spec, run, nil)
	var cleaned []string
	var errs []error
	for _, s := range snks {
		if sc, ok := s.(unindexedScanner); ok {
			sc.ScanUnindexed(o.ScanUnindexed)
		}
		if err := s.Abort(ctx, info); err != nil {
			errs = append(errs, fmt.Errorf("sink %s: abort run %s: %w", s.Name(), run.ID, err))
			continue
		}
		cleaned = append(cleaned, s.Name())
	}
	if err := errors.Join(errs...); err != nil {
		return cleaned, err
	}
	return cleaned, nil
}

// localCancelDrain bounds how long a local cancel waits for the process
// running the run (a `precog backfill` of several dates, another `precog
// run`) to stop its shards before cleaning the sinks: that process sees
// the cancel at its next heartbeat or ledger poll, within seconds.
const localCancelDrain = time.Minute

// CancelLocal cancels an unfinished run of the embedded ledger under
// stateDir, so the next `precog run` starts afresh. The ledger is shared
// by the state dir's processes: a live process running the run's job (a
// local backfill's date: it holds the job's lock) stops the run's shards,
// waited for up to localCancelDrain, and goes on with its other runs.
// When none runs the job, the cancel holds the job's lock itself, so that
// no `precog run` resumes the run while its sinks are cleaned.
func CancelLocal(ctx context.Context, stateDir, runID string, o CancelOptions) (CancelResult, error) {
	led, err := open.Open(ctx, open.Location{StateDir: stateDir}, open.Options{})
	if err != nil {
		return CancelResult{}, err
	}
	defer led.Close()
	o.Drain = 0
	if run, err := led.Run(ctx, runID); err == nil {
		release, lerr := LockJob(stateDir, run.Job)
		switch {
		case lerr == nil:
			defer release()
		case errors.Is(lerr, ledger.ErrBusy):
			o.Drain = localCancelDrain
		default:
			return CancelResult{Run: run}, lerr
		}
	}
	return Cancel(ctx, led, runID, o)
}

// WriteCleaned says which sinks the cancelled run's data was removed from
// (for people: precog cancel, the dashboard).
func (r CancelResult) WriteCleaned(w io.Writer) {
	if r.NoSpec {
		fmt.Fprintf(w, "the run recorded no spec: its sinks were not cleaned\n")
	}
	for _, name := range r.Cleaned {
		fmt.Fprintf(w, "  %s: removed the data of version %s\n", name, r.Run.Version)
	}
}

// waitCleanupGone waits, at most within, until runID's pending-cleanup
// record is gone (a worker finished it); false when it is still there.
func waitCleanupGone(ctx context.Context, led ledger.Store, runID string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		_, err := led.PendingCleanup(ctx, runID)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			return true
		case err != nil || time.Now().After(deadline):
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}
