package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sources"
)

// OpenOrCreateParams name the run to join or create in a shared ledger.
type OpenOrCreateParams struct {
	Spec *jobs.Spec
	// SpecFile is the spec's absolute path, recorded for workers on other
	// machines.
	SpecFile     string
	ModelVersion string
	// Plans are the source's shard plan, used when a run is created.
	Plans []sources.ShardPlan
}

// OtherWorkError is an open run of the same job and params that computes
// other work (another spec or model): joining it would publish a mix.
type OtherWorkError struct{ Run jobs.Run }

func (e *OtherWorkError) Error() string {
	return fmt.Sprintf("run %s of %s is open with another spec or model; cancel it (precog cancel %s) or wait for it", e.Run.ID, e.Run.Job, e.Run.ID)
}

// OpenOrCreate joins the open run of (job, params) when it computes the
// same work, or creates a new run; joined says which. A concurrent submit
// may create or finish the open run in between, so it tries a few times.
func OpenOrCreate(ctx context.Context, led ledger.Ledger, p OpenOrCreateParams) (run jobs.Run, joined bool, err error) {
	for range 3 {
		open, err := led.OpenRun(ctx, p.Spec.Name, jobs.ParamsKey(p.Spec.Params))
		switch {
		case err == nil:
			if !open.SameWork(p.Spec, p.ModelVersion) {
				return open, false, &OtherWorkError{Run: open}
			}
			return open, true, nil
		case !errors.Is(err, ledger.ErrNotFound):
			return jobs.Run{}, false, err
		}
		run, shards := NewRun(p.Spec, NewRunOptions{ModelVersion: p.ModelVersion, Plans: p.Plans, SpecFile: p.SpecFile})
		err = led.CreateRun(ctx, run, shards)
		if err == nil {
			return run, false, nil
		}
		if !errors.Is(err, ledger.ErrRunOpen) {
			return jobs.Run{}, false, err
		}
	}
	return jobs.Run{}, false, fmt.Errorf("%s: runs of these params keep being created and finished concurrently; retry", p.Spec.Name)
}
