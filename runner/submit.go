package runner

import (
	"context"
	"fmt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// Submit creates a pending run of spec in the ledger for the workers of
// its pool (precog submit), planned as c (CheckJob) planned it, with
// opts' priority and spec file. An open run of the same params is a
// *ledger.OpenRunError naming it.
func Submit(ctx context.Context, led ledger.Ledger, spec *jobs.Spec, c *CheckedJob, opts NewRunOptions) (jobs.Run, []jobs.Shard, error) {
	opts.ModelVersion, opts.Plans = c.Job.Model.Version(), c.Plans
	run, shards := NewRun(spec, opts)
	if err := led.CreateRun(ctx, run, shards); err != nil {
		return run, shards, fmt.Errorf("submit %s: %w", spec.Name, err)
	}
	return run, shards, nil
}
