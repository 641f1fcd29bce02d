package runner

import (
	"context"
	"fmt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sources"
)

// CheckedJob is a job that passed every check validate makes: its spec, its
// model against its source, its sinks reachable, and its shard plan.
type CheckedJob struct {
	Job   *Job
	Plans []sources.ShardPlan
	snks  []sinks.Sink
}

// Close releases the job's source, model and sinks.
func (c *CheckedJob) Close() {
	for _, s := range c.snks {
		s.Close()
	}
	c.Job.Close()
}

// CheckJob makes the checks of precog validate (and submit) from metadata
// only: the model's I/O against the source schema, the shard plan, and
// every sink reachable with its credentials. Errors are *RefusedError
// (exit 2), except an unreachable store, which the CLI maps to exit 75.
func CheckJob(ctx context.Context, spec *jobs.Spec) (*CheckedJob, error) {
	job, err := OpenJob(ctx, spec)
	if err != nil {
		return nil, refused(err)
	}
	c := &CheckedJob{Job: job}
	fail := func(err error) (*CheckedJob, error) {
		c.Close()
		return nil, refused(err)
	}
	if c.Plans, err = job.Source.Plan(ctx, spec.Source.RowsPerShard); err != nil {
		return fail(fmt.Errorf("plan: %w", err))
	}
	if c.snks, err = OpenSinks(ctx, spec); err != nil {
		return fail(err)
	}
	for _, s := range c.snks {
		if ch, ok := s.(sinks.Checker); ok {
			if err := ch.Check(ctx); err != nil {
				return fail(fmt.Errorf("sinks.%s: %w", s.Name(), err))
			}
		}
	}
	return c, nil
}
