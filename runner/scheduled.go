package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// Scheduled is the runner's side of precog scheduler: its Plan, Cancel and
// (embedded mode) Fired are the scheduler's hooks (scheduler.Options).
type Scheduled struct {
	Ledger ledger.Store
	// StateDir holds the embedded ledger's state, where Fired runs a run.
	StateDir string
	Logger   *slog.Logger
}

// Plan plans a fired run from source metadata, as submit does.
func (s Scheduled) Plan(ctx context.Context, spec *jobs.Spec) (jobs.Run, []jobs.Shard, error) {
	job, err := OpenJob(ctx, spec)
	if err != nil {
		return jobs.Run{}, nil, err
	}
	defer job.Close()
	run, shards, err := PlanRun(ctx, job)
	if err == nil && spec.File != "" {
		if abs, aerr := filepath.Abs(spec.File); aerr == nil {
			run.SpecFile = abs
		}
	}
	return run, shards, err
}

// Cancel ends an open run for concurrency: replace: cancelled in the
// ledger, then its unpublished data removed from every sink. A run in its
// publish step is not cancelled (the ledger refuses it under the run's
// lock): the error says so, the tick is not recorded, and the next pass
// fires it once the publish has finished.
func (s Scheduled) Cancel(ctx context.Context, run jobs.Run) error {
	_, err := Cancel(ctx, s.Ledger, run.ID, CancelOptions{Reason: "replaced by a newer scheduled run (concurrency: replace)", Log: s.Logger})
	switch {
	case errors.Is(err, ledger.ErrPublishing):
		return fmt.Errorf("concurrency replace waits: run %s is publishing, and cancelling it between two sinks would leave them on different versions; the tick fires once the publish finished: %w", run.ID, err)
	case errors.Is(err, ErrNotCancellable):
		return nil // finished meanwhile: a published run's data is not aborted
	}
	return err
}

// Fired executes a fired run in this process (embedded mode): RunLocal
// finds it open in the ledger and runs it to the end.
func (s Scheduled) Fired(ctx context.Context, run jobs.Run) {
	spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
	if err != nil {
		s.Logger.Error("fired run: its spec no longer loads", "run", run.ID, "err", err)
		_ = s.Ledger.SetRunState(ctx, run.ID, jobs.RunFailed, err.Error())
		return
	}
	res, err := RunLocal(ctx, spec, LocalOptions{StateDir: s.StateDir, Ledger: s.Ledger, Logger: s.Logger})
	if err != nil {
		s.Logger.Error("fired run failed", "run", run.ID, "err", err)
		return
	}
	s.Logger.Info("fired run succeeded", "run", res.Run.ID, "rows_out", res.Run.Counts.RowsOut, "duration", res.Duration.Round(time.Millisecond))
}
