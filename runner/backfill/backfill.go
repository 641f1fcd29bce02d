// Package backfill turns `precog backfill` into ledger records: one
// backfill and one ordinary child run per partition value, created (or
// resumed) here, then run on this machine (RunLocal, one process) or by the
// pool's workers (at most Parallel in flight, the rest waiting in the
// ledger). The command line only parses flags and prints.
package backfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

// Ledger is what a backfill needs of a ledger: runs and backfills.
type Ledger interface {
	ledger.Ledger
	ledger.Backfills
}

// Partition is one value of the range with the spec loaded for it.
type Partition struct {
	Value string
	Spec  *jobs.Spec
}

// PlanFunc returns a partition's model version and shard plan (metadata
// only, nothing read).
type PlanFunc func(ctx context.Context, spec *jobs.Spec) (modelVersion string, plans []sources.ShardPlan, err error)

// Request is one `precog backfill` command.
type Request struct {
	// SpecFile is the spec's path, recorded (absolute) on every child run.
	SpecFile string
	// Param is the param the values fill; From, To, Step span them.
	Param, From, To, Step string
	Partitions            []Partition
	// Parallel bounds the child runs in flight.
	Parallel int
	// Priority of the child runs; nil: one below the job's, so that a
	// backfill claims below the job's scheduled refreshes.
	Priority *int
	// Force recomputes values that already succeeded with this spec and model.
	Force bool
	// Plan plans each partition; nil: Planner.
	Plan PlanFunc
}

// Outcome is what Ensure did.
type Outcome struct {
	Backfill ledger.Backfill
	// Resumed: the same command's backfill existed and was taken up.
	Resumed bool
	// Created counts the new child runs; Skipped the values already done
	// (same spec and model) and Open those whose run was open already.
	Created, Skipped, Open int
}

// Ensure creates the backfill of req, or resumes the one the same command
// made: a value whose current run succeeded with the same spec and model is
// skipped (unless Force), one whose run is open with them is left to go on,
// and every other value gets a new run. A new backfill also skips values
// whose newest run of the job succeeded with the same spec and model (it
// attaches that run). A value open with another spec or model is an error
// naming the run to cancel.
func Ensure(ctx context.Context, led Ledger, req Request) (Outcome, error) {
	if len(req.Partitions) == 0 || req.Parallel < 1 {
		return Outcome{}, errors.New("backfill: no values, or parallel < 1")
	}
	plan := req.Plan
	if plan == nil {
		plan = NewPlanner().Plan
	}
	file, err := filepath.Abs(req.SpecFile)
	if err != nil {
		return Outcome{}, fmt.Errorf("backfill: %w", err)
	}
	first := req.Partitions[0].Spec
	others := otherParams(first.Params, req.Param)
	priority := first.Priority - 1
	if req.Priority != nil {
		priority = *req.Priority
	}
	prev, err := find(ctx, led, first.Name, req, others)
	if err != nil {
		return Outcome{}, err
	}
	var out Outcome
	var add []ledger.BackfillRun
	for _, p := range req.Partitions {
		version, plans, err := plan(ctx, p.Spec)
		if err != nil {
			return Outcome{}, fmt.Errorf("%s=%s: %w", req.Param, p.Value, err)
		}
		cur, err := currentRun(ctx, led, prev, p)
		if err != nil {
			return Outcome{}, err
		}
		same := cur.ID != "" && cur.SameWork(p.Spec, version)
		switch {
		case cur.ID != "" && !cur.State.Terminal() && !same:
			return Outcome{}, fmt.Errorf("%s=%s: run %s is open with another spec or model; cancel it (precog cancel %s) or wait for it", req.Param, p.Value, cur.ID, cur.ID)
		case cur.ID != "" && !cur.State.Terminal():
			out.Open++
			if prev == nil {
				add = append(add, ledger.BackfillRun{Value: p.Value, Run: cur, Attach: true})
			}
			continue
		case same && cur.State == jobs.RunSucceeded && !req.Force:
			out.Skipped++
			if prev == nil {
				add = append(add, ledger.BackfillRun{Value: p.Value, Run: cur, Attach: true})
			}
			continue
		}
		run, shards := runner.NewRun(p.Spec, runner.NewRunOptions{ModelVersion: version, Plans: plans, SpecFile: file, Priority: &priority})
		add = append(add, ledger.BackfillRun{Value: p.Value, Run: run, Shards: shards})
		out.Created++
	}
	if prev == nil {
		b := ledger.Backfill{
			ID: first.Name + "-bf-" + jobs.NewVersion(time.Now()).String(), Job: first.Name, Param: req.Param,
			From: req.From, To: req.To, Step: req.Step, ParamsKey: others, Parallel: req.Parallel,
			Priority: priority, Pool: first.Pool,
		}
		if err := led.CreateBackfill(ctx, b, add); err != nil {
			return Outcome{}, refuseOpen(err)
		}
		out.Backfill, err = led.Backfill(ctx, b.ID)
		return out, err
	}
	out.Resumed = true
	if err := led.SetBackfill(ctx, prev.ID, req.Parallel, false); err != nil {
		return Outcome{}, err
	}
	if len(add) > 0 {
		if err := led.AddBackfillRuns(ctx, prev.ID, add); err != nil {
			return Outcome{}, refuseOpen(err)
		}
	}
	out.Backfill, err = led.Backfill(ctx, prev.ID)
	return out, err
}

// refuseOpen makes the ledger's refusal of a value whose (job, params)
// got an open run meanwhile (another process) a *runner.RefusedError:
// nothing was recorded, and the error names the run.
func refuseOpen(err error) error {
	if open := (*ledger.OpenRunError)(nil); errors.As(err, &open) {
		return &runner.RefusedError{Err: err}
	}
	return err
}

// otherParams is the params key of every param but the backfilled one.
func otherParams(params map[string]string, name string) string {
	o := make(map[string]string, len(params))
	for k, v := range params {
		if k != name {
			o[k] = v
		}
	}
	return jobs.ParamsKey(o)
}

// find returns the backfill the same command made (job, param, range,
// step and other params), newest first, or nil.
func find(ctx context.Context, led Ledger, job string, req Request, others string) (*ledger.Backfill, error) {
	list, err := led.Backfills(ctx, job, 0)
	if err != nil {
		return nil, err
	}
	for _, b := range list {
		if b.Param == req.Param && b.From == req.From && b.To == req.To && b.Step == req.Step && b.ParamsKey == others {
			return &b, nil
		}
	}
	return nil, nil
}

// currentRun is the run that computes p now: its current run in prev,
// else (a new backfill) the job's newest run of the same params. Zero
// when there is none.
func currentRun(ctx context.Context, led Ledger, prev *ledger.Backfill, p Partition) (jobs.Run, error) {
	if prev != nil {
		for _, d := range prev.Dates {
			if d.Value == p.Value && d.Run() != "" {
				r, err := led.Run(ctx, d.Run())
				if errors.Is(err, ledger.ErrNotFound) {
					return jobs.Run{}, nil
				}
				return r, err
			}
		}
		return jobs.Run{}, nil
	}
	if r, err := led.OpenRun(ctx, p.Spec.Name, jobs.ParamsKey(p.Spec.Params)); err == nil {
		return r, nil
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return jobs.Run{}, err
	}
	runs, err := led.Runs(ctx, p.Spec.Name, 0)
	if err != nil {
		return jobs.Run{}, err
	}
	key := jobs.ParamsKey(p.Spec.Params)
	for _, r := range runs { // newest first
		if r.ParamsKey == key {
			return r, nil
		}
	}
	return jobs.Run{}, nil
}

// Planner plans partitions, loading each model once (its version) and
// opening only the source of each further partition.
type Planner struct {
	versions map[string]string
}

// NewPlanner returns an empty Planner.
func NewPlanner() *Planner { return &Planner{versions: map[string]string{}} }

// Plan implements PlanFunc.
func (p *Planner) Plan(ctx context.Context, spec *jobs.Spec) (string, []sources.ShardPlan, error) {
	key := spec.Model.Path
	if !filepath.IsAbs(key) {
		key = filepath.Join(filepath.Dir(spec.File), key)
	}
	if v, ok := p.versions[key]; ok {
		src, err := runner.OpenSource(ctx, spec)
		if err != nil {
			return "", nil, err
		}
		if c, ok := src.(io.Closer); ok {
			defer c.Close()
		}
		plans, err := src.Plan(ctx, spec.Source.RowsPerShard)
		if err != nil {
			return "", nil, fmt.Errorf("plan: %w", err)
		}
		return v, plans, nil
	}
	job, err := runner.OpenJob(ctx, spec)
	if err != nil {
		return "", nil, err
	}
	defer job.Close()
	plans, err := job.Source.Plan(ctx, spec.Source.RowsPerShard)
	if err != nil {
		return "", nil, fmt.Errorf("plan: %w", err)
	}
	p.versions[key] = job.Model.Version()
	return job.Model.Version(), plans, nil
}

// LocalOptions run a backfill's values on this machine.
type LocalOptions struct {
	// StateDir holds rejects (and, with Ledger, the ledger).
	StateDir string
	// Parallel values at once; ShardParallel shards within each.
	Parallel, ShardParallel int
	Logger                  *slog.Logger
	// OnProgress, when set, receives each value's progress.
	OnProgress func(value string, p runner.Progress)
	// OnDone, when set, receives each value's result once it is final: a
	// value that needed no run (ended before) at the start, the others as
	// their runs end, so a progress bar over the range counts them done.
	OnDone func(ValueResult)
	// OnRangeProgress, when set, receives the progress of the whole range
	// (RangeProgress) at each value's progress and end, for one bar.
	OnRangeProgress func(runner.Progress)
	ProgressEvery   time.Duration
}

// ValueResult is how one value's run ended on this machine.
type ValueResult struct {
	Value string
	Res   runner.Result
	Err   error
	// Started is false for a value never started (interrupted first).
	Started bool
	// Done is set when the value needed no run (done before).
	Done bool
}

// RunLocal executes the open child runs of b on this machine, at most
// o.Parallel at once in value order, through led (the state dir's
// embedded ledger, shared by the values). A failed value does not stop the
// others; after ctx ends no further value starts.
func RunLocal(ctx context.Context, led ledger.Store, b ledger.Backfill, specs map[string]*jobs.Spec, o LocalOptions) []ValueResult {
	o = o.foldRange(b)
	results := make([]ValueResult, len(b.Dates))
	var doneMu sync.Mutex
	final := func(i int, r ValueResult) {
		results[i] = r
		if o.OnDone != nil {
			doneMu.Lock()
			defer doneMu.Unlock()
			o.OnDone(r)
		}
	}
	var todo []int
	for i, d := range b.Dates {
		results[i].Value = d.Value
		if res, ok := settled(ctx, led, d); ok {
			final(i, res)
			continue
		}
		if specs[d.Value] == nil {
			final(i, ValueResult{Value: d.Value, Err: fmt.Errorf("no spec loaded for %s", d.Value), Started: true})
			continue
		}
		todo = append(todo, i)
	}
	sem := make(chan struct{}, max(o.Parallel, 1))
	done := make(chan struct{}, len(todo))
	pending := len(todo)
	if pending == 0 {
		return results
	}
	for _, i := range todo {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			pending--
			continue
		}
		go func(i int) {
			defer func() { <-sem; done <- struct{}{} }()
			v := b.Dates[i].Value
			// A date cancelled while it waited for its turn (precog cancel
			// from another process) stays cancelled: no new run of it.
			if res, ok := settled(ctx, led, b.Dates[i]); ok {
				final(i, res)
				return
			}
			opts := runner.LocalOptions{StateDir: o.StateDir, Parallel: o.ShardParallel, Logger: o.Logger, Ledger: led, ProgressEvery: o.ProgressEvery}
			if o.OnProgress != nil {
				opts.OnProgress = func(p runner.Progress) { o.OnProgress(v, p) }
			}
			res, err := runner.RunLocal(ctx, specs[v], opts)
			vr := ValueResult{Value: v, Res: res, Err: err, Started: true}
			if sr, ok := settled(ctx, led, b.Dates[i]); err != nil && ok && sr.Res.Run.State == jobs.RunCancelled {
				vr = sr // cancelled mid-run: say so, not how its shards stopped
			}
			final(i, vr)
		}(i)
	}
	for range pending {
		<-done
	}
	return results
}

// foldRange has o.OnProgress and o.OnDone also feed o.OnRangeProgress
// the range's progress, folded over b's values (RangeProgress).
func (o LocalOptions) foldRange(b ledger.Backfill) LocalOptions {
	if o.OnRangeProgress == nil {
		return o
	}
	values := make([]string, len(b.Dates))
	for i, d := range b.Dates {
		values[i] = d.Value
	}
	agg := NewRangeProgress(b.Param, values, time.Now())
	onProgress, onDone, onRange := o.OnProgress, o.OnDone, o.OnRangeProgress
	o.OnProgress = func(v string, p runner.Progress) {
		if onProgress != nil {
			onProgress(v, p)
		}
		onRange(agg.Update(v, p, time.Now()))
	}
	o.OnDone = func(r ValueResult) {
		if onDone != nil {
			onDone(r)
		}
		onRange(agg.Finish(r.Value, r.Res, time.Now()))
	}
	return o
}

// settled is the result of date d when its run needs no execution: it
// ended (succeeded, failed or cancelled) or cannot be read.
func settled(ctx context.Context, led Ledger, d ledger.BackfillDate) (ValueResult, bool) {
	r, err := led.Run(ctx, d.Run())
	switch {
	case err != nil:
		return ValueResult{Value: d.Value, Err: err, Started: true}, true
	case r.State.Terminal():
		res := ValueResult{Value: d.Value, Res: runner.Result{Run: r, AlreadyDone: r.State == jobs.RunSucceeded}, Done: true, Started: true}
		if r.State != jobs.RunSucceeded {
			res.Err = fmt.Errorf("run %s %s: %s", r.ID, r.State, r.Error)
		}
		return res, true
	}
	return ValueResult{}, false
}
