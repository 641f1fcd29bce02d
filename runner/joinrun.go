package runner

import (
	"context"
	"log/slog"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// JoinParams is a run of precog run --db: the work (the spec, its plan
// and model version, as OpenOrCreate takes them), the Postgres ledger it
// goes to, and how this process works on it.
type JoinParams struct {
	Ledger ledger.Store
	Work   OpenOrCreateParams
	// Parallel is the shards in flight here, each on a device of the
	// spec's model (0: DefaultParallel for it).
	Parallel int
	StateDir string
	Logger   *slog.Logger
	// Wait follows the run while this process works on it; its error is
	// JoinRun's (WaitRun with a progress bar, in precog run --db).
	Wait func(ctx context.Context, runID string) error
}

// JoinRun joins the run of (job, params) open in the ledger (workers may
// be on it already) or creates one (OpenOrCreate; an open run of other
// work is an *OtherWorkError), then works on that run's shards only, as a
// worker of its pool would, until Wait returns. The worker stops then:
// shards it holds go back to the pool.
func JoinRun(ctx context.Context, p JoinParams) error {
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	run, joined, err := OpenOrCreate(ctx, p.Ledger, p.Work)
	if err != nil {
		return err
	}
	if joined {
		p.Logger.Info("joining the open run", "run", run.ID, "state", run.State)
	} else {
		p.Logger.Info("run created", "run", run.ID, "shards", len(p.Work.Plans))
	}
	device := p.Work.Spec.Model.Device
	if device == "" {
		device = jobs.DeviceCPU
	}
	w := NewWorker(p.Ledger, WorkerOptions{Run: run.ID, Pool: run.Pool, Devices: []string{device}, Parallel: p.Parallel, StateDir: p.StateDir, Logger: p.Logger})
	done := make(chan error, 1)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { done <- w.Run(wctx) }()
	err = p.Wait(ctx, run.ID)
	stopWorker()
	<-done
	return err
}
