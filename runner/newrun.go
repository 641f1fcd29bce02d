// newrun.go holds the one constructor of a new run from a checked spec,
// used by precog run, submit, backfill and the scheduler alike, so every
// run is built the same way.

package runner

import (
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

// NewRunOptions are what a new run records beyond its spec.
type NewRunOptions struct {
	// ModelVersion is the loaded model's version (model.Model.Version).
	ModelVersion string
	// Plans are the source's shard plan, one shard each.
	Plans []sources.ShardPlan
	// SpecFile is recorded as where the spec came from; "" records
	// spec.File. Workers on other machines resolve the spec's relative
	// paths against its directory, so submit records an absolute path.
	SpecFile string
	// Priority overrides the spec's priority when set (submit --priority).
	Priority *int
	// Now is the creation time (default time.Now()).
	Now time.Time
}

// NewRun builds a pending run of spec with its planned shards, ready for
// ledger.CreateRun: ID <job>-<version>, the raw spec (before ${ENV}
// expansion, so secrets never reach the ledger), params, params key, spec
// hash, model version, pool and priority.
func NewRun(spec *jobs.Spec, o NewRunOptions) (jobs.Run, []jobs.Shard) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.UTC().Truncate(time.Microsecond)
	version := jobs.NewVersion(now).String()
	file := o.SpecFile
	if file == "" {
		file = spec.File
	}
	priority := spec.Priority
	if o.Priority != nil {
		priority = *o.Priority
	}
	pool := spec.Pool
	pool = jobs.PoolOrDefault(pool)
	run := jobs.Run{
		ID: spec.Name + "-" + version, Job: spec.Name, Version: version, Params: spec.Params,
		ParamsKey: jobs.ParamsKey(spec.Params), SpecHash: spec.Hash(), ModelVersion: o.ModelVersion,
		Pool: pool, Priority: priority, State: jobs.RunPending, Shards: len(o.Plans),
		CreatedAt: now, UpdatedAt: now, Spec: spec.Raw, SpecFile: file,
	}
	shards := make([]jobs.Shard, len(o.Plans))
	for i, p := range o.Plans {
		shards[i] = jobs.Shard{RunID: run.ID, Index: i, Plan: p.Plan, EstRows: p.Rows, State: jobs.ShardPending, UpdatedAt: now}
	}
	return run, shards
}
