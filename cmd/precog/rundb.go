package main

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/open"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
)

// clusterRun is how `precog run --db` was asked to run: the spec's path,
// the ledger, the shards in flight here and whether to draw progress.
type clusterRun struct {
	specPath, dsn string
	parallel      int
	progress      bool
}

// runOnCluster is `precog run --db URL`: runner.JoinRun joins the run of
// (job, params) open in the Postgres ledger or creates one, and works on
// it here until it ends, with run's progress bar, summary and exit codes.
func runOnCluster(cmd *cobra.Command, g *globals, spec *jobs.Spec, o clusterRun) error {
	ctx := cmd.Context()
	c, err := runner.CheckJob(ctx, spec)
	if err != nil {
		return err
	}
	work := runner.OpenOrCreateParams{Spec: spec, ModelVersion: c.Job.Model.Version(), Plans: c.Plans}
	c.Close()
	if work.SpecFile, err = filepath.Abs(o.specPath); err != nil {
		return invalid(err)
	}
	led, err := openCluster(ctx, o.dsn, open.Options{Postgres: pgledger.Options{Logger: g.log}})
	if err != nil {
		return err
	}
	defer led.Close()
	err = runner.JoinRun(ctx, runner.JoinParams{Ledger: led, Work: work, Parallel: o.parallel, StateDir: g.stateDir, Logger: g.log,
		Wait: func(ctx context.Context, id string) error {
			return waitRun(ctx, g, led, id, o.progress, cmd.OutOrStdout())
		}})
	if oe := (*runner.OtherWorkError)(nil); errors.As(err, &oe) {
		return invalid(err) // an open run of other work: wait for it or cancel it
	}
	return err
}
