package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks"
)

// GC actions, as `precog gc` prints them.
const (
	GCKept        = "kept"
	GCRemoved     = "removed"
	GCWouldRemove = "would remove"
	GCSkipped     = "skipped"
	GCFailed      = "failed"
)

// GCOptions tune GC.
type GCOptions struct {
	// DryRun lists what would be removed and changes nothing (no lock is
	// taken either).
	DryRun bool
}

// GCEntry is one place of one version in one sink, and what GC did with it.
type GCEntry struct {
	Sink    string `json:"sink"`
	Version string `json:"version"`
	What    string `json:"what"`
	Action  string `json:"action"`
	// Reason says why it was kept, skipped or failed ("current",
	// "retained", "open run R (running)", "target locked by …", the error).
	Reason string `json:"reason,omitempty"`
	// RunID and RunState are the ledger's run of the version, when known.
	RunID    string        `json:"run_id,omitempty"`
	RunState jobs.RunState `json:"run_state,omitempty"`
}

// GCReport is what GC found and did.
type GCReport struct {
	Job string `json:"job"`
	// Runs and OpenRuns count the job's runs in the ledger consulted (a
	// wrong --state-dir or --db shows as 0).
	Runs     int       `json:"runs"`
	OpenRuns int       `json:"open_runs"`
	DryRun   bool      `json:"dry_run"`
	Entries  []GCEntry `json:"entries"`
}

// gcSink is one sink's inventory, and its lock while GC removes.
type gcSink struct {
	sink   sinks.Sink
	stored []sinks.StoredVersion
	// locked is cancelled once GC's lock on the sink is lost; unlock gives
	// it back (nil: not locked).
	locked context.Context
	unlock func()
	// skip is why nothing of the sink is removed (locked by a writer).
	skip string
}

// GC removes the data that the job's sinks hold for spec's target (job and
// params) and that no run owns: versions neither published (current or
// retained) nor belonging to an open run of the ledger — what a killed run
// that was never resumed, or a failed abort, left behind. Removing is each
// sink's Abort of the version, under the sink's writer lock so that GC
// never races a live writer; a sink locked by a writer is skipped and the
// error is a *sinks.LockedError naming it. The report lists every place,
// kept or not; the error joins what went wrong after everything else was
// done.
func GC(ctx context.Context, spec *jobs.Spec, led ledger.Store, opts GCOptions) (GCReport, error) {
	rep := GCReport{Job: spec.Name, DryRun: opts.DryRun, Entries: []GCEntry{}}
	snks, err := OpenSinks(ctx, spec)
	if err != nil {
		return rep, err
	}
	defer func() {
		for _, s := range snks {
			s.Close()
		}
	}()
	target := sinks.TargetInfo(spec)
	host, _ := os.Hostname()
	holder := sinks.Holder{Job: spec.Name, RunID: "gc-" + ledger.ProcessName(), Host: host, PID: os.Getpid(), Since: time.Now().UTC().Truncate(time.Second)}
	var errs []error
	var inv []*gcSink
	for _, s := range snks {
		g, err := gcInventory(ctx, s, target, holder, opts.DryRun)
		if err != nil {
			errs = append(errs, err)
		}
		if g == nil {
			continue
		}
		if g.unlock != nil {
			defer g.unlock()
		}
		inv = append(inv, g)
	}
	// The ledger is read after the inventories: a run that wrote anything
	// listed was created before, so an open one is seen here.
	runs, err := led.Runs(ctx, spec.Name, 0)
	if err != nil {
		return rep, fmt.Errorf("gc: list runs of job %s: %w", spec.Name, err)
	}
	byVersion := map[string]jobs.Run{}
	for _, r := range runs {
		byVersion[r.Version] = r
		rep.Runs++
		if !r.State.Terminal() {
			rep.OpenRuns++
		}
	}
	kept, err := keptUntil(ctx, led, runs, time.Now())
	if err != nil {
		return rep, fmt.Errorf("gc: pending cleanups of job %s: %w", spec.Name, err)
	}
	for _, g := range inv {
		entries, err := gcSinkVersions(ctx, g, target, gcRuns{byVersion: byVersion, keptUntil: kept}, opts.DryRun)
		rep.Entries = append(rep.Entries, entries...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// gcInventory lists what s holds; unless dryRun and when anything may go,
// it takes s's writer lock first and lists again under it. A sink locked
// by a writer is returned with skip set and the *sinks.LockedError.
func gcInventory(ctx context.Context, s sinks.Sink, target sinks.RunInfo, holder sinks.Holder, dryRun bool) (*gcSink, error) {
	inv, ok := s.(sinks.Inventory)
	if !ok {
		return nil, nil // every sink lists its data; one that cannot is left alone
	}
	g := &gcSink{sink: s}
	stored, err := inv.Stored(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("sink %s: list stored versions: %w", s.Name(), err)
	}
	g.stored = stored
	if dryRun || !anyUnpublished(stored) {
		return g, nil
	}
	// The lock's target does not depend on the version, but a sink may
	// check that the run names one.
	lockRun := target
	lockRun.RunID, lockRun.Version = holder.RunID, holder.RunID
	lctx, unlock, err := LockSinks(ctx, []sinks.Sink{s}, lockRun, holder)
	var locked *sinks.LockedError
	if errors.As(err, &locked) {
		g.skip = "target locked by " + locked.Holder.String()
		return g, fmt.Errorf("gc skipped: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock for gc: %w", err)
	}
	g.locked, g.unlock = lctx, unlock
	if g.stored, err = inv.Stored(ctx, target); err != nil {
		return g, fmt.Errorf("sink %s: list stored versions: %w", s.Name(), err)
	}
	return g, nil
}

func anyUnpublished(vs []sinks.StoredVersion) bool {
	for _, v := range vs {
		if !v.Published {
			return true
		}
	}
	return false
}

// gcRuns is what the ledger says of the job's runs: each by version,
// and until when a failed run keeps its staged data for a retry.
type gcRuns struct {
	byVersion map[string]jobs.Run
	keptUntil map[string]time.Time // run id → due time of its cleanup
}

// keptUntil maps each failed run of runs whose staged data is kept for a
// retry (a pending cleanup not due at now) to when it is due. A ledger
// without cleanups keeps none.
func keptUntil(ctx context.Context, led ledger.Cleanups, runs []jobs.Run, now time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, r := range runs {
		if r.State != jobs.RunFailed {
			continue
		}
		c, err := led.PendingCleanup(ctx, r.ID)
		switch {
		case errors.Is(err, ledger.ErrUnsupported):
			return out, nil
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			return nil, err
		case c.DueAt.After(now):
			out[r.ID] = c.DueAt
		}
	}
	return out, nil
}

// gcSinkVersions decides every entry of one sink and aborts, once per
// version, those no published state, open run or retry keeps.
func gcSinkVersions(ctx context.Context, g *gcSink, target sinks.RunInfo, gr gcRuns, dryRun bool) ([]GCEntry, error) {
	runs := gr.byVersion
	var out []GCEntry
	var errs []error
	aborted := map[string]error{}
	for _, sv := range g.stored {
		e := GCEntry{Sink: g.sink.Name(), Version: sv.Version, What: sv.What}
		r, known := runs[sv.Version]
		if known {
			e.RunID, e.RunState = r.ID, r.State
		}
		switch {
		case sv.Current:
			e.Action, e.Reason = GCKept, "current"
		case sv.Published:
			e.Action, e.Reason = GCKept, "retained"
		case known && !r.State.Terminal():
			e.Action, e.Reason = GCKept, fmt.Sprintf("open run %s (%s)", r.ID, r.State)
		case known && !gr.keptUntil[r.ID].IsZero():
			e.Action, e.Reason = GCKept, fmt.Sprintf("failed run %s keeps it for a retry until %s (precog retry %s resumes it; precog cancel %s removes it)",
				r.ID, gr.keptUntil[r.ID].UTC().Format(time.RFC3339), r.ID, r.ID)
		case known && heldKept(r, time.Now()):
			e.Action, e.Reason = GCKept, fmt.Sprintf("run %s held by its checks until %s (publish --accept or cancel it)", r.ID, r.UpdatedAt.Add(HeldRetention).Format(time.RFC3339))
		case dryRun:
			e.Action = GCWouldRemove
		case g.skip != "":
			e.Action, e.Reason = GCSkipped, g.skip
		default:
			err, done := aborted[sv.Version]
			if !done {
				err = gcAbort(ctx, g, target, sv.Version, e.RunID)
				aborted[sv.Version] = err
				if err != nil {
					errs = append(errs, err)
				}
			}
			e.Action = GCRemoved
			if err != nil {
				e.Action, e.Reason = GCFailed, err.Error()
			}
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// gcAbort removes one version with the sink's Abort, unless GC's lock on
// the sink was lost meanwhile.
func gcAbort(ctx context.Context, g *gcSink, target sinks.RunInfo, version, runID string) error {
	if g.locked != nil && g.locked.Err() != nil {
		return fmt.Errorf("sink %s: gc's writer lock was lost; version %s left as it is", g.sink.Name(), version)
	}
	run := target
	run.Version = version
	run.RunID = runID
	if run.RunID == "" {
		run.RunID = "gc" // no run of the ledger wrote it
	}
	if err := g.sink.Abort(ctx, run); err != nil {
		return fmt.Errorf("sink %s: remove version %s: %w", g.sink.Name(), version, err)
	}
	return nil
}
