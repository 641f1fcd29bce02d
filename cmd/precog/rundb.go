package main

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

// clusterRun is how `precog run --db` was asked to run: the spec's path,
// the ledger, the shards in flight here and whether to draw progress.
type clusterRun struct {
	specPath, dsn string
	parallel      int
	progress      bool
}

// runOnCluster is `precog run --db URL`: the run of (job, params) that is
// open in the Postgres ledger is joined (workers may be on it already), or
// a new one is created; this process then works on that run's shards only,
// as a worker would, until the run ends, with run's progress bar and exit
// codes.
func runOnCluster(cmd *cobra.Command, g *globals, spec *jobs.Spec, o clusterRun) error {
	ctx := cmd.Context()
	c, err := runner.CheckJob(ctx, spec)
	if err != nil {
		return err
	}
	modelVersion, plans := c.Job.Model.Version(), c.Plans
	c.Close()
	led, err := openCluster(ctx, o.dsn, pgledger.Options{Logger: g.log})
	if err != nil {
		return err
	}
	defer led.Close()
	run, joined, err := openOrSubmit(ctx, led, spec, o.specPath, modelVersion, plans)
	if err != nil {
		return err
	}
	if joined {
		g.log.Info("joining the open run", "run", run.ID, "state", run.State)
	} else {
		g.log.Info("run created", "run", run.ID, "shards", len(plans))
	}
	devices := make([]string, max(o.parallel, 1))
	for i := range devices {
		devices[i] = spec.Model.Device
		if devices[i] == "" {
			devices[i] = jobs.DeviceCPU
		}
	}
	w := runner.NewWorker(led, runner.WorkerOptions{Run: run.ID, Pool: run.Pool, Devices: devices, StateDir: g.stateDir, Logger: g.log})
	done := make(chan error, 1)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { done <- w.Run(wctx) }()
	err = waitRun(ctx, g, led, run.ID, o.progress)
	stopWorker()
	<-done
	return err
}

// openOrSubmit joins the open run of (job, params) or creates one
// (runner.OpenOrCreate); an open run of other work is invalid input.
func openOrSubmit(ctx context.Context, led ledger.Ledger, spec *jobs.Spec, specPath, modelVersion string, plans []sources.ShardPlan) (jobs.Run, bool, error) {
	abs, err := filepath.Abs(specPath)
	if err != nil {
		return jobs.Run{}, false, invalid(err)
	}
	run, joined, err := runner.OpenOrCreate(ctx, led, runner.OpenOrCreateParams{Spec: spec, SpecFile: abs, ModelVersion: modelVersion, Plans: plans})
	if oe := (*runner.OtherWorkError)(nil); errors.As(err, &oe) {
		return run, false, invalid(err)
	}
	return run, joined, err
}
