package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
)

// Retried is what Retry did to a backfill: its failed or cancelled values
// taken up again, in value order.
type Retried struct {
	ID     string
	Values []RetriedValue
}

// RetriedValue is one value Retry took up again.
type RetriedValue struct {
	Value string
	// Run computes the value now.
	Run string
	// Resumed: Run is the value's failed run, taken back up because its
	// staged data was still kept (retry.keep_failed): its committed shards
	// are not recomputed. Otherwise Run is a new run.
	Resumed bool
	// Why the value's failed run, whose staged data was kept, got a new
	// run all the same ("" when there was no such run).
	Why string
}

// New lists the values given a new run (the ones precog retry executes
// itself on the embedded ledger).
func (r Retried) New() []string {
	var out []string
	for _, v := range r.Values {
		if !v.Resumed {
			out = append(out, v.Value)
		}
	}
	return out
}

// String says, value by value, what Retry did: a failed run resumed or a
// new run.
func (r Retried) String() string {
	if len(r.Values) == 0 {
		return fmt.Sprintf("backfill %s has no failed or cancelled value: nothing to retry", r.ID)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "backfill %s: %d value(s) retried", r.ID, len(r.Values))
	for _, v := range r.Values {
		switch {
		case v.Resumed:
			fmt.Fprintf(&b, "\n  %s: resumed run %s (staged data kept: committed shards are not recomputed)", v.Value, v.Run)
		case v.Why != "":
			fmt.Fprintf(&b, "\n  %s: new run %s (%s)", v.Value, v.Run, v.Why)
		default:
			fmt.Fprintf(&b, "\n  %s: new run %s", v.Value, v.Run)
		}
	}
	return b.String()
}

// retryValue is a failed or cancelled value of a backfill, with the spec
// its current run recorded (loaded in this environment).
type retryValue struct {
	value string
	run   jobs.Run
	spec  *jobs.Spec
	// kept: run failed with its staged data kept (a pending cleanup).
	kept bool
}

// Retry takes up again every value of backfill id whose current run failed
// or was cancelled, and the backfill itself (no longer cancelled). A value
// whose run failed with its staged data still kept (retry.keep_failed, on
// the Postgres ledger) has that run taken back up (RetryBackfillRun: its
// committed shards are not recomputed, and it waits for the backfill's
// --parallel bound like a new run); every other value (data removed, a
// permanent failure, cancelled, a run superseded by a newer succeeded one,
// or one a worker is cleaning now) gets a new run, planned again from the
// spec its run recorded with this environment's ${ENV} values. A recorded
// spec that does not load here (a variable unset) is a
// *runner.RefusedError, and nothing changes. So is a value whose params got
// another open run meanwhile (another process), found as the runs are
// taken up: the values resumed before it stay resumed.
func Retry(ctx context.Context, led ledger.Store, id string, lookupEnv func(string) (string, bool), plan PlanFunc) (Retried, error) {
	out := Retried{ID: id}
	if plan == nil {
		plan = NewPlanner().Plan
	}
	b, err := led.Backfill(ctx, id)
	if err != nil {
		return out, err
	}
	todo, err := retryValues(ctx, led, b, lookupEnv)
	if err != nil {
		return out, err
	}
	// Every new run is planned before anything changes.
	planned := map[string]ledger.BackfillRun{}
	for _, v := range todo {
		if !v.kept {
			if planned[v.value], err = newRetryRun(ctx, b, v, plan); err != nil {
				return out, err
			}
		}
	}
	if err := led.SetBackfill(ctx, id, b.Parallel, false); err != nil {
		return out, err
	}
	var add []ledger.BackfillRun
	for _, v := range todo {
		rv := RetriedValue{Value: v.value}
		if v.kept {
			if rv.Why, err = resume(ctx, led, id, v.run); err != nil {
				return out, err
			}
			if rv.Why == "" {
				rv.Run, rv.Resumed = v.run.ID, true
				out.Values = append(out.Values, rv)
				continue
			}
			if planned[v.value], err = newRetryRun(ctx, b, v, plan); err != nil {
				return out, err
			}
		}
		add = append(add, planned[v.value])
		rv.Run = planned[v.value].Run.ID
		out.Values = append(out.Values, rv)
	}
	if len(add) > 0 {
		if err := led.AddBackfillRuns(ctx, id, add); err != nil {
			return out, refuseOpen(err)
		}
	}
	return out, nil
}

// retryValues lists b's failed and cancelled values with the specs their
// runs recorded, and whether a failed run's staged data is still kept.
func retryValues(ctx context.Context, led ledger.Store, b ledger.Backfill, lookupEnv func(string) (string, bool)) ([]retryValue, error) {
	var todo []retryValue
	for _, d := range b.Dates {
		r, err := led.Run(ctx, d.Run())
		if err != nil {
			return nil, err
		}
		if r.State != jobs.RunFailed && r.State != jobs.RunCancelled {
			continue
		}
		spec, err := jobs.Parse(r.Spec, r.SpecFile, r.Params, lookupEnv)
		if err != nil { // a configuration error here (an unset variable)
			return nil, &runner.RefusedError{Err: fmt.Errorf("%s=%s: the spec run %s recorded (%s): %w", b.Param, d.Value, r.ID, r.SpecFile, err)}
		}
		v := retryValue{value: d.Value, run: r, spec: spec}
		if r.State == jobs.RunFailed {
			_, err := led.PendingCleanup(ctx, r.ID)
			switch {
			case err == nil:
				v.kept = true
			case !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrUnsupported):
				return nil, fmt.Errorf("%s=%s: run %s's staged data: %w", b.Param, d.Value, r.ID, err)
			}
		}
		todo = append(todo, v)
	}
	return todo, nil
}

// newRetryRun plans a new run of v from the spec its run recorded, at the
// run's priority.
func newRetryRun(ctx context.Context, b ledger.Backfill, v retryValue, plan PlanFunc) (ledger.BackfillRun, error) {
	version, plans, err := plan(ctx, v.spec)
	if err != nil {
		return ledger.BackfillRun{}, fmt.Errorf("%s=%s: %w", b.Param, v.value, err)
	}
	prio := v.run.Priority
	run, shards := runner.NewRun(v.spec, runner.NewRunOptions{ModelVersion: version, Plans: plans, SpecFile: v.run.SpecFile, Priority: &prio})
	return ledger.BackfillRun{Value: v.value, Run: run, Shards: shards}, nil
}

// resume takes failed run r of backfill id, whose staged data is kept,
// back up; or says why the value gets a new run instead: a newer run of
// its params succeeded (reopening r would publish results older than what
// readers see), or a worker is removing the data now. A value whose params
// got another open run meanwhile is a *runner.RefusedError naming it.
func resume(ctx context.Context, led ledger.Store, id string, r jobs.Run) (string, error) {
	o, err := runner.SupersededBy(ctx, led, r)
	if err != nil {
		return "", err
	}
	if o.ID != "" {
		return fmt.Sprintf("run %s is superseded by the newer succeeded run %s", r.ID, o.ID), nil
	}
	_, err = led.RetryBackfillRun(ctx, id, r.ID)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, ledger.ErrCleaning):
		return fmt.Sprintf("a worker is removing the staged data run %s kept", r.ID), nil
	case errors.Is(err, ledger.ErrRunOpen), errors.Is(err, ledger.ErrRunFinished), errors.Is(err, ledger.ErrNotFound):
		return "", &runner.RefusedError{Err: err}
	}
	return "", err
}
