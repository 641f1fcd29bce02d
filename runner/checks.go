package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/profile"
	"github.com/precog-ml/precog/sinks"
)

// ErrHeld means the run's checks failed and on_failure is hold: nothing was
// published, the staged data is kept, and `precog publish RUN --accept` or
// `precog cancel RUN` resolves it.
var ErrHeld = errors.New("held by its checks")

// ErrChecksFailed means the run's checks failed and on_failure is fail.
var ErrChecksFailed = errors.New("checks failed")

// HeldRetention is how long gc keeps a held run's staged data for
// `precog publish --accept`; after it, gc removes it like any unpublished
// version (the run stays held in the ledger, and an accept then fails its
// verification).
const HeldRetention = 7 * 24 * time.Hour

// heldKept reports whether r is held and within HeldRetention at now.
func heldKept(r jobs.Run, now time.Time) bool {
	return r.State == jobs.RunHeld && now.Sub(r.UpdatedAt) < HeldRetention
}

// CheckTarget names what a job's version replaces when published: its
// rendered sink targets. Runs are checked against the last version
// published to the same (job, target), so two dates of a backfill that
// write different partitions never compare with each other.
func CheckTarget(spec *jobs.Spec) string {
	var parts []string
	if s := spec.Sinks.Redis; s != nil {
		parts = append(parts, "redis:"+s.Namespace)
	}
	if s := spec.Sinks.Postgres; s != nil {
		parts = append(parts, "postgres:"+s.Schema+"."+s.Table)
	}
	if s := spec.Sinks.Parquet; s != nil {
		parts = append(parts, "parquet:"+s.Path)
	}
	return strings.Join(parts, " ")
}

// newProfileBuilder starts a shard's output profile, or returns nil when
// the spec has no checks (nothing is computed then). plannedKeys is the
// run's planned rows, estimated from the shard's (the key sample's cap).
func newProfileBuilder(spec *jobs.Spec, plannedKeys int64) *profile.Builder {
	if spec.Checks == nil {
		return nil
	}
	fields := make([]string, 0, len(spec.Model.Outputs))
	for _, name := range spec.Model.OutputNames() {
		fields = append(fields, spec.Model.Outputs[name])
	}
	k := spec.Checks.Sample()
	return profile.NewBuilder(profile.Options{Fields: fields, SampleFields: profile.SampleFields(spec.Checks), SampleSize: k,
		Cap: profile.SampleCap(k, plannedKeys)})
}

// checkOutcome is a run's checks: the report (stored in the ledger) and
// the merged profile, stored as the baseline once the run is published.
type checkOutcome struct {
	report  profile.Report
	profile string
}

// runProfile merges the profiles of a run's committed shards.
func runProfile(ctx context.Context, led ledger.Store, spec *jobs.Spec, runID string) (*profile.Profile, int64, error) {
	shards, err := led.Shards(ctx, runID)
	if err != nil {
		return nil, 0, err
	}
	stored, err := led.ShardProfiles(ctx, runID)
	if err != nil {
		return nil, 0, err
	}
	merged := profile.New(spec.Checks.Sample())
	var rows int64
	for _, s := range shards {
		if s.State != jobs.ShardCommitted {
			continue
		}
		rows += s.Counts.RowsOut
		enc, ok := stored[s.Index]
		if !ok {
			return nil, 0, fmt.Errorf("shard %d has no output profile (committed before the spec had checks?): rerun it with `precog retry`", s.Index)
		}
		p, err := profile.Decode(enc)
		if err != nil {
			return nil, 0, fmt.Errorf("shard %d: %w", s.Index, err)
		}
		if err := merged.Merge(p); err != nil {
			return nil, 0, fmt.Errorf("shard %d: %w", s.Index, err)
		}
	}
	return merged, rows, nil
}

// evaluateChecks runs the spec's checks of a staged run against the
// published version of its (job, target) and stores the report. It
// returns nil when the spec has no checks.
func evaluateChecks(ctx context.Context, led ledger.Store, spec *jobs.Spec, run jobs.Run) (*checkOutcome, error) {
	if spec.Checks == nil {
		return nil, nil
	}
	cur, rows, err := runProfile(ctx, led, spec, run.ID)
	if err != nil {
		return nil, fmt.Errorf("checks of run %s: %w", run.ID, err)
	}
	var base *profile.Baseline
	switch b, err := led.Baseline(ctx, run.Job, CheckTarget(spec)); {
	case errors.Is(err, ledger.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("checks of run %s: %w", run.ID, err)
	case b.RunID != run.ID:
		p, err := profile.Decode(b.Profile)
		if err != nil {
			return nil, fmt.Errorf("checks of run %s: the published version %s: %w", run.ID, b.Version, err)
		}
		base = &profile.Baseline{RunID: b.RunID, Version: b.Version, RowsOut: b.RowsOut, Profile: p}
	}
	out := &checkOutcome{report: profile.Evaluate(spec.Checks, base, cur, rows), profile: cur.Encode()}
	rep, err := json.Marshal(out.report)
	if err != nil {
		return nil, err
	}
	if err := led.PutCheckReport(ctx, run.ID, rep); err != nil {
		return nil, err
	}
	return out, nil
}

// checkBeforePublish is the step between stage and publish: it evaluates
// the checks and, when one fails, returns an error wrapping ErrHeld
// (on_failure: hold) or ErrChecksFailed (fail). A nil outcome means the
// spec has no checks.
func checkBeforePublish(ctx context.Context, led ledger.Store, spec *jobs.Spec, run jobs.Run, log *slog.Logger) (*checkOutcome, error) {
	start := time.Now()
	out, err := evaluateChecks(ctx, led, spec, run)
	if err != nil || out == nil {
		return out, err
	}
	log.Info("checks evaluated", "run", run.ID, "passed", out.report.Passed, "against", out.report.Against,
		"first_run", out.report.FirstRun, "checks", len(out.report.Checks), "took", time.Since(start).Round(time.Millisecond))
	if out.report.Passed {
		return out, nil
	}
	why := strings.Join(out.report.Failed(), "; ")
	if spec.Checks.Hold() {
		return out, fmt.Errorf("run %s %w: %s; nothing was published (accept it with `precog publish %s --accept --reason TEXT`, or discard it with `precog cancel %s`)", run.ID, ErrHeld, why, run.ID, run.ID)
	}
	return out, fmt.Errorf("run %s: %w: %s", run.ID, ErrChecksFailed, why)
}

// recordPublished stores a published run's profile as its target's
// baseline, so that the next run is checked against it.
func recordPublished(ctx context.Context, led ledger.Store, spec *jobs.Spec, run jobs.Run, out *checkOutcome) error {
	if out == nil {
		return nil
	}
	var rows int64
	if p, err := profile.Decode(out.profile); err == nil {
		rows = p.Rows
	}
	return led.PutBaseline(ctx, ledger.Baseline{Job: run.Job, Target: CheckTarget(spec), RunID: run.ID, Version: run.Version, RowsOut: rows, Profile: out.profile})
}

// CurrentUser is who `publish --accept` records when --by is not given.
func CurrentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// HeldOptions says which held run to resolve and who resolves it.
type HeldOptions struct {
	Ledger ledger.Store
	RunID  string
	// By and Reason are recorded in the ledger.
	By, Reason string
	// Sinks, when set, replace the sinks of the run's recorded spec.
	Sinks []sinks.Sink
	Log   *slog.Logger
}

func (o HeldOptions) withDefaults() HeldOptions {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// heldRun opens a held run's spec and sinks.
func heldRun(ctx context.Context, o HeldOptions) (jobs.Run, *jobs.Spec, []sinks.Sink, func(), error) {
	none := func() {}
	run, err := o.Ledger.Run(ctx, o.RunID)
	if err != nil {
		return run, nil, nil, none, err
	}
	if run.State != jobs.RunHeld {
		return run, nil, nil, none, fmt.Errorf("run %s is %s, not held by its checks", run.ID, run.State)
	}
	spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
	if err != nil {
		return run, nil, nil, none, fmt.Errorf("run %s: its recorded spec: %w", run.ID, err)
	}
	if o.Sinks != nil {
		return run, spec, o.Sinks, none, nil
	}
	snks, err := OpenSinks(ctx, spec)
	if err != nil {
		return run, nil, nil, none, fmt.Errorf("run %s: %w", run.ID, err)
	}
	return run, spec, snks, func() {
		for _, s := range snks {
			s.Close()
		}
	}, nil
}

// PublishHeld publishes a run held by its checks (`precog publish RUN
// --accept`): under every sink's writer lock it verifies the staged data
// again, cuts every sink over as a normal publish does, records who
// accepted it and why, and makes it the version later runs are checked
// against.
func PublishHeld(ctx context.Context, o HeldOptions) (jobs.Run, error) {
	o = o.withDefaults()
	run, spec, snks, closeSinks, err := heldRun(ctx, o)
	if err != nil {
		return run, err
	}
	defer closeSinks()
	job, err := OpenJob(ctx, spec)
	if err != nil {
		return run, err
	}
	defer job.Close()
	info := sinks.NewRunInfo(spec, run, job.Output)
	p := &publisher{led: o.Ledger, snks: snks, info: info, spec: spec, log: o.Log, accepted: true}
	if err := p.Publish(ctx, run); err != nil {
		if pe := (*publishError)(nil); errors.As(err, &pe) && pe.step == "stage" {
			return run, fmt.Errorf("run %s: its staged data no longer verifies; nothing was published: %w", run.ID, err)
		}
		return run, err
	}
	if err := o.Ledger.ResolveHold(ctx, ledger.ResolveHoldParams{RunID: run.ID, State: jobs.RunSucceeded, By: o.By, Reason: o.Reason}); err != nil {
		return run, err
	}
	runFinished(run.Job, jobs.RunSucceeded)
	return o.Ledger.Run(ctx, run.ID)
}

// DiscardHeld discards a held run (`precog cancel RUN`): it is marked
// cancelled with who and why, and its staged data is removed from every sink.
func DiscardHeld(ctx context.Context, o HeldOptions) (jobs.Run, error) {
	o = o.withDefaults()
	run, spec, snks, closeSinks, err := heldRun(ctx, o)
	if err != nil {
		return run, err
	}
	defer closeSinks()
	if err := o.Ledger.ResolveHold(ctx, ledger.ResolveHoldParams{RunID: run.ID, State: jobs.RunCancelled, By: o.By, Reason: o.Reason}); err != nil {
		return run, err
	}
	runFinished(run.Job, jobs.RunCancelled)
	info := sinks.NewRunInfo(spec, run, nil)
	for _, s := range snks {
		if err := s.Abort(ctx, info); err != nil {
			o.Log.Warn("abort sink", "sink", s.Name(), "run", run.ID, "err", err)
		}
	}
	return o.Ledger.Run(ctx, run.ID)
}

// Diff is the checks' report of a run: against version against (a run of
// the same job that has profiles), or, when against is "", the report
// stored at its publish step, else one computed now against its target's
// published version. The run's spec must have a checks: block (profiles
// are only computed then).
func Diff(ctx context.Context, led ledger.Store, runID, against string) (profile.Report, error) {
	var rep profile.Report
	run, err := led.Run(ctx, runID)
	if err != nil {
		return rep, err
	}
	spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
	if err != nil {
		return rep, fmt.Errorf("run %s: its recorded spec: %w", run.ID, err)
	}
	if spec.Checks == nil {
		return rep, fmt.Errorf("run %s: its spec has no checks: block, so no output profile was computed", run.ID)
	}
	if against == "" {
		if b, err := led.CheckReport(ctx, run.ID); err == nil {
			return rep, json.Unmarshal(b, &rep)
		}
		out, err := evaluateChecks(ctx, led, spec, run)
		if err != nil {
			return rep, err
		}
		return out.report, nil
	}
	runs, err := led.Runs(ctx, run.Job, 0)
	if err != nil {
		return rep, err
	}
	var other *jobs.Run
	for i := range runs {
		if runs[i].Version == against || runs[i].ID == against {
			other = &runs[i]
			break
		}
	}
	if other == nil {
		return rep, fmt.Errorf("job %s has no run of version %s: %w", run.Job, against, ledger.ErrNotFound)
	}
	cur, rows, err := runProfile(ctx, led, spec, run.ID)
	if err != nil {
		return rep, fmt.Errorf("run %s: %w", run.ID, err)
	}
	old, oldRows, err := runProfile(ctx, led, spec, other.ID)
	if err != nil {
		return rep, fmt.Errorf("run %s: %w", other.ID, err)
	}
	return profile.Evaluate(spec.Checks, &profile.Baseline{RunID: other.ID, Version: other.Version, RowsOut: oldRows, Profile: old}, cur, rows), nil
}

// CancelHeld discards run o.RunID when its checks hold it (precog cancel
// on a held run, DiscardHeld); held is false, and nothing changes, when it
// is not held or cannot be read (the ordinary cancel goes on and reports
// that).
func CancelHeld(ctx context.Context, o HeldOptions) (r jobs.Run, held bool, err error) {
	r, err = o.Ledger.Run(ctx, o.RunID)
	if err != nil || r.State != jobs.RunHeld {
		return r, false, nil
	}
	r, err = DiscardHeld(ctx, o)
	return r, true, err
}
