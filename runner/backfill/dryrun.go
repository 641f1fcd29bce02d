package backfill

import (
	"context"
	"fmt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

// DryRun is `backfill --dry-run` of a range: every partition planned
// (found or missing, rows and shards from metadata), the found ones'
// totals, and the partition an estimate probes.
type DryRun struct {
	List []PartitionPlan
	// Rows and Shards sum the Found partitions; Missing counts the others.
	Rows          int64
	Found, Shards int
	Missing       int
	// Probe is the first found partition's spec with its plans; nil when
	// every partition is missing (nothing to estimate).
	Probe      *jobs.Spec
	ProbePlans []sources.ShardPlan
	// Refused is why the dry run ends in refusal (a *runner.RefusedError,
	// after the listing): the backfill would refuse the range, or every
	// partition is missing; nil when the backfill would accept it.
	Refused error
}

// PlanDryRun plans every partition of rg without reading data or
// recording anything.
func PlanDryRun(ctx context.Context, rg Range) DryRun {
	list, plans := PlanPartitions(ctx, rg.Partitions)
	d := DryRun{List: list}
	for i, p := range list {
		if !p.Found {
			d.Missing++
			continue
		}
		d.Rows += p.Rows
		d.Found, d.Shards = d.Found+1, d.Shards+p.Shards
		if d.Probe == nil {
			d.Probe, d.ProbePlans = rg.Partitions[i].Spec, plans[p.Value]
		}
	}
	switch {
	case rg.Refused != nil:
		d.Refused = &runner.RefusedError{Err: fmt.Errorf("the backfill would refuse this range: %w", rg.Refused)}
	case d.Probe == nil:
		d.Refused = &runner.RefusedError{Err: fmt.Errorf("%s: every partition is missing: nothing to estimate", rg.req.SpecFile)}
	}
	return d
}

// EstimateParams estimate the dry run's found partitions, parallel at
// once, the ledger sampled under stateDir.
func (d DryRun) EstimateParams(parallel int, stateDir string) EstimateParams {
	return EstimateParams{Spec: d.Probe, Plans: d.ProbePlans, Rows: d.Rows, Runs: d.Found, Shards: d.Shards,
		Parallel: parallel, StateDir: stateDir}
}
