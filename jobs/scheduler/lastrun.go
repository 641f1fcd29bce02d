package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// LastScheduledRun is job's newest run a schedule fired (one with a
// scheduled_for param); ok false when it has none among its newest 100.
func LastScheduledRun(ctx context.Context, led RunLister, job string) (run jobs.Run, at time.Time, ok bool, err error) {
	runs, err := led.Runs(ctx, job, 100)
	if err != nil {
		return jobs.Run{}, time.Time{}, false, fmt.Errorf("last run of job %s: %w", job, err)
	}
	for _, r := range runs { // newest first
		at, err := time.Parse(time.RFC3339, r.Params["scheduled_for"])
		if err != nil {
			continue // a manual run
		}
		return r, at, true, nil
	}
	return jobs.Run{}, time.Time{}, false, nil
}
