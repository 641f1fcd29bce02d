package backfill

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	parquetsrc "github.com/precog-ml/precog/sources/parquet"
)

// MaxValues bounds a range typed by mistake (--to 2062-…).
const MaxValues = 3660

// Value layouts: one date per day, or one hour.
const (
	dayLayout  = time.DateOnly
	hourLayout = "2006-01-02T15"
)

// RangeRequest is the range of a backfill as the command line gives it.
type RangeRequest struct {
	SpecFile string
	// Param is the param the values fill; From and To (inclusive) and Step
	// ("1d", or "Nh" with 1 <= N <= 23) span them.
	Param, From, To, Step string
	// Params are the other run parameters, k=v.
	Params []string
	// Parallel values at once; ShardParallel shards within each.
	Parallel, ShardParallel int
}

// Range is a planned range: every value with the spec loaded for it.
type Range struct {
	Values     []string
	Partitions []Partition
	// Refused holds every reason the backfill refuses the range (missing
	// Parquet partitions, sinks that would keep only the last value), a
	// *runner.RefusedError; nil when it accepts it. A dry run lists the
	// range anyway.
	Refused error
	// req is what the range was planned from.
	req RangeRequest
}

// PlanRange lists the values of a range and loads the spec once per value,
// with every check the backfill makes before anything runs: the range and
// its step parse and hold at most MaxValues values, each value's spec
// loads and uses the param and every other param, every Parquet partition
// exists, and no sink would keep only the last value. An error (a
// *runner.RefusedError) means nothing can be planned; the other checks'
// refusals are all in Range.Refused, so that a dry run passes exactly what
// the backfill accepts.
func PlanRange(req RangeRequest) (Range, error) {
	values, err := valueRange(req.From, req.To, req.Step)
	if err != nil {
		return Range{}, &runner.RefusedError{Err: err}
	}
	if req.Parallel < 1 || req.ShardParallel < 1 {
		return Range{}, &runner.RefusedError{Err: fmt.Errorf("--parallel and --shard-parallel must be >= 1 (got %d, %d)", req.Parallel, req.ShardParallel)}
	}
	for _, p := range req.Params {
		if name, _, _ := strings.Cut(p, "="); name == req.Param {
			return Range{}, &runner.RefusedError{Err: fmt.Errorf("--param %s: set by backfill from --from/--to", req.Param)}
		}
	}
	specs, err := loadRangeSpecs(req.SpecFile, req.Params, req.Param, values)
	if err != nil {
		return Range{}, &runner.RefusedError{Err: err}
	}
	rg := Range{Values: values, Partitions: make([]Partition, len(values)), req: req}
	for i, v := range values {
		rg.Partitions[i] = Partition{Value: v, Spec: specs[i]}
	}
	if err := errors.Join(missingPartitions(req.SpecFile, req.Param, values, specs), checkRangePublish(specs, req.Param, req.Parallel)); err != nil {
		rg.Refused = &runner.RefusedError{Err: err}
	}
	return rg, nil
}

// Specs are the range's specs by value.
func (rg Range) Specs() map[string]*jobs.Spec {
	out := make(map[string]*jobs.Spec, len(rg.Partitions))
	for _, p := range rg.Partitions {
		out[p.Value] = p.Spec
	}
	return out
}

// Request is the backfill of rg for Ensure: its range recorded as the
// first and last values (so the same range, however written, resumes the
// same backfill), at the parallelism it was planned for.
func (rg Range) Request() Request {
	return Request{SpecFile: rg.req.SpecFile, Param: rg.req.Param, From: rg.Values[0], To: rg.Values[len(rg.Values)-1],
		Step: rg.req.Step, Partitions: rg.Partitions, Parallel: rg.req.Parallel}
}

// valueRange lists the values from from to to inclusive, every step ("1d",
// or "Nh" with 1 <= N <= 23), formatted with the step's layout.
func valueRange(from, to, step string) ([]string, error) {
	inc, layout, err := parseStep(step)
	if err != nil {
		return nil, err
	}
	want := "YYYY-MM-DD"
	if layout == hourLayout {
		want = "YYYY-MM-DDTHH"
	}
	if from == "" || to == "" {
		return nil, fmt.Errorf("--from and --to are required (%s)", want)
	}
	f, err := time.Parse(layout, from)
	if err != nil {
		return nil, fmt.Errorf("--from %q: want %s for --step %s", from, want, step)
	}
	t, err := time.Parse(layout, to)
	if err != nil {
		return nil, fmt.Errorf("--to %q: want %s for --step %s", to, want, step)
	}
	if t.Before(f) {
		return nil, fmt.Errorf("--to %s is before --from %s", to, from)
	}
	var out []string
	for v := f; !v.After(t); v = inc(v) {
		if len(out) == MaxValues {
			return nil, fmt.Errorf("--from %s --to %s: more than %d values", from, to, MaxValues)
		}
		out = append(out, v.Format(layout))
	}
	return out, nil
}

// parseStep reads a step: the increment and the layout of the values.
func parseStep(step string) (func(time.Time) time.Time, string, error) {
	if step == "1d" {
		return func(t time.Time) time.Time { return t.AddDate(0, 0, 1) }, dayLayout, nil
	}
	var n int
	if _, err := fmt.Sscanf(step, "%dh", &n); err == nil && fmt.Sprintf("%dh", n) == step && n >= 1 && n <= 23 {
		d := time.Duration(n) * time.Hour
		return func(t time.Time) time.Time { return t.Add(d) }, hourLayout, nil
	}
	return nil, "", fmt.Errorf("--step %q: want 1d or Nh (N from 1 to 23)", step)
}

// loadRangeSpecs loads the spec once per value and checks that it uses
// the param and every other param.
func loadRangeSpecs(path string, params []string, name string, values []string) ([]*jobs.Spec, error) {
	specs := make([]*jobs.Spec, len(values))
	for i, v := range values {
		p, err := jobs.ParseParams(append(slices.Clone(params), name+"="+v))
		if err != nil {
			return nil, err
		}
		spec, err := jobs.Load(path, p)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(spec.TemplateParams(), name) {
			return nil, fmt.Errorf("%s: backfill needs a spec that uses {{.%s}} (it uses: %v); --param-name names another param", path, name, spec.TemplateParams())
		}
		if err := spec.CheckParams(); err != nil {
			return nil, err
		}
		specs[i] = spec
	}
	return specs, nil
}

// missingPartitions lists, in one error, the values whose Parquet
// partition does not exist (nil when all do).
func missingPartitions(path, name string, values []string, specs []*jobs.Spec) error {
	var missing []string
	for i, spec := range specs {
		if p := spec.Source.Parquet; p != nil {
			if _, err := parquetsrc.New(p.Path); err != nil {
				missing = append(missing, fmt.Sprintf("  %s=%s: %v", name, values[i], err))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: %d of %d partitions missing, nothing ran:\n%s", path, len(missing), len(values), strings.Join(missing, "\n"))
	}
	return nil
}

// checkRangePublish refuses, for more than one value, sinks where each
// value's publish replaces the previous one's, so only the last would stay,
// and, for more than one value at once, values that would write the same
// keys in place (they would fail at each other's writer lock): planned here,
// before anything runs. Sinks templated per value (a Parquet path or Redis
// namespace with the param, a Postgres upsert keyed by it) run in parallel.
func checkRangePublish(specs []*jobs.Spec, name string, parallel int) error {
	if len(specs) < 2 {
		return nil
	}
	s := specs[0]
	var errs []error
	if p := s.Sinks.Postgres; p != nil && p.Mode == jobs.PostgresReplace {
		errs = append(errs, fmt.Errorf("sinks.postgres.mode: replace: each %s's run would replace the view %s.%s, leaving only the last one; use mode: upsert (keyed by key and params, every %s kept)", name, p.Schema, p.Table, name))
	}
	if r := s.Sinks.Redis; r != nil && specs[1].Sinks.Redis.Namespace == r.Namespace {
		switch {
		case r.Publish == jobs.RedisPublishAtomic:
			errs = append(errs, fmt.Errorf("sinks.redis.publish: atomic: %s:current is one per namespace, so each %s's publish would replace the previous one; use a namespace per %s (namespace: \"%s-{{.%s}}\"), or publish: in_place", r.Namespace, name, name, r.Namespace, name))
		case parallel > 1:
			errs = append(errs, fmt.Errorf("sinks.redis: every %s writes the same keys of namespace %s in place, so --parallel %d would have them fail at each other's writer lock; use a namespace per %s (namespace: \"%s-{{.%s}}\") to run them in parallel, or --parallel 1 to run them in order", name, r.Namespace, parallel, name, r.Namespace, name))
		}
	}
	if p := s.Sinks.Parquet; p != nil && specs[1].Sinks.Parquet.Path == p.Path {
		errs = append(errs, fmt.Errorf("sinks.parquet.path: %s does not use {{.%s}}, so each %s's output would replace the previous one's", p.Path, name, name))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: cannot backfill %d values into these sinks: %w", s.File, len(specs), errors.Join(errs...))
	}
	return nil
}
