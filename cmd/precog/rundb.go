package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

// runOnCluster is `precog run --db URL`: the run of (job, params) that is
// open in the Postgres ledger is joined (workers may be on it already), or
// a new one is created; this process then works on that run's shards only,
// as a worker would, until the run ends, with run's progress bar and exit
// codes.
func runOnCluster(cmd *cobra.Command, g *globals, spec *jobs.Spec, specPath, dsn string, parallel int, progress bool) error {
	ctx := cmd.Context()
	c, err := checkJob(ctx, spec)
	if err != nil {
		return err
	}
	modelVersion, plans := c.job.Model.Version(), c.plans
	c.Close()
	led, err := openCluster(ctx, dsn, pgledger.Options{Logger: g.log})
	if err != nil {
		return err
	}
	defer led.Close()
	run, joined, err := openOrSubmit(ctx, led, spec, specPath, modelVersion, plans)
	if err != nil {
		return err
	}
	if joined {
		g.log.Info("joining the open run", "run", run.ID, "state", run.State)
	} else {
		g.log.Info("run created", "run", run.ID, "shards", len(plans))
	}
	devices := make([]string, max(parallel, 1))
	for i := range devices {
		devices[i] = spec.Model.Device
		if devices[i] == "" {
			devices[i] = "cpu"
		}
	}
	w := runner.NewWorker(led, runner.WorkerOptions{Run: run.ID, Pool: run.Pool, Devices: devices, StateDir: g.stateDir, Logger: g.log})
	done := make(chan error, 1)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { done <- w.Run(wctx) }()
	err = waitRun(ctx, g, led, run.ID, progress)
	stopWorker()
	<-done
	return err
}

// openOrSubmit joins the open run of (job, params), refusing one whose spec
// or model differ, or creates a new run.
func openOrSubmit(ctx context.Context, led ledger.Ledger, spec *jobs.Spec, specPath, modelVersion string, plans []sources.ShardPlan) (jobs.Run, bool, error) {
	abs, err := filepath.Abs(specPath)
	if err != nil {
		return jobs.Run{}, false, invalid(err)
	}
	for range 3 { // a concurrent submit may create or finish the run in between
		open, err := led.OpenRun(ctx, spec.Name, jobs.ParamsKey(spec.Params))
		switch {
		case err == nil:
			if open.SpecHash != spec.Hash() || open.ModelVersion != modelVersion {
				return open, false, invalid(fmt.Errorf("run %s of %s is open with another spec or model; cancel it (precog cancel %s) or wait for it", open.ID, spec.Name, open.ID))
			}
			return open, true, nil
		case !errors.Is(err, ledger.ErrNotFound):
			return jobs.Run{}, false, err
		}
		run, shards := runner.NewRun(spec, runner.NewRunOptions{ModelVersion: modelVersion, Plans: plans, SpecFile: abs})
		err = led.CreateRun(ctx, run, shards)
		if err == nil {
			return run, false, nil
		}
		if !errors.Is(err, ledger.ErrRunOpen) {
			return jobs.Run{}, false, err
		}
	}
	return jobs.Run{}, false, fmt.Errorf("%s: runs of these params keep being created and finished concurrently; retry", spec.Name)
}
