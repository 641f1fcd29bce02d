package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/opsserver"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/model"
)

// loadSpec loads a job spec with --param values (jobs.LoadArgs), refusing
// a param that the spec's templates do not use (a typo would otherwise run
// silently).
func loadSpec(path string, params []string) (*jobs.Spec, error) {
	spec, err := jobs.LoadArgs(path, params)
	if err != nil {
		return nil, invalid(err)
	}
	return spec, nil
}

func newRunCmd(g *globals) *cobra.Command {
	var (
		params     []string
		parallel   int
		restart    bool
		noProgress bool
		metrics    string
		db         string
		ui         string
	)
	cmd := &cobra.Command{
		Use:   "run JOB.yaml [--param k=v]...",
		Short: "Run a job on this machine (resumes an unfinished run of the same job and params)",
		Long: `Run the whole job on this machine, recording progress in the embedded ledger
under --state-dir.

If a run of the same job with the same --param values was interrupted (Ctrl-C,
kill -9, power loss), the same command resumes it: shards already committed are
not recomputed, and the output is identical to an uninterrupted run. After a
finished run, the command starts a new run with a new version.

Rows whose features are null or not finite are rejected, not fatal: they are
listed (key, file and row, reason) under <state-dir>/rejects/<run>/ and the run
fails only when they exceed max_rejected_fraction (default 0.01).`,
		Example: `  precog run jobs/user-recs.yaml
  precog run jobs/scores.yaml --param date=2026-11-01
  precog run jobs/scores.yaml --param date=2026-11-01 --restart   # spec changed: start over`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// ONNX Runtime's library (tens of MB to map and relocate) loads
			// while the spec, the ledger and the source open; the first model
			// load waits for it (model.Init is once), so an error of its own
			// still surfaces there, after the spec's and the ledger's.
			go func() { _ = model.Init() }()
			spec, err := loadSpec(args[0], params)
			if err != nil {
				return err
			}
			if parallel < 0 {
				return invalid(fmt.Errorf("--parallel: must be >= 0 (got %d; 0 picks by the model's device)", parallel))
			}
			if db != "" {
				return runOnCluster(cmd, g, spec, clusterRun{specPath: args[0], dsn: db, parallel: parallel, progress: !noProgress})
			}
			stopMetrics, err := opsserver.Serve(cmd.Context(), opsserver.Params{Addr: metrics, Flag: "--metrics-addr", Log: g.log, Collectors: runner.Metrics()})
			if err != nil {
				return invalid(err)
			}
			defer stopMetrics()
			g.runningJob()
			lopts := runner.LocalOptions{
				StateDir: g.stateDir, Parallel: parallel, Restart: restart, Logger: g.log,
			}
			if ui != "" {
				// RunLocal takes the job's lock itself unless given a
				// ledger, as the UI's is.
				release, err := runner.LockJob(g.stateDir, spec.Name)
				if err != nil {
					return err
				}
				defer release()
				stopUI, err := serveRunUI(cmd.Context(), g, ui, &lopts)
				if err != nil {
					return err
				}
				defer stopUI()
			}
			bar := newProgressBar(os.Stderr, !noProgress, g.log)
			lopts.OnProgress, lopts.ProgressEvery = bar.update, bar.every()
			res, err := runner.RunLocal(cmd.Context(), spec, lopts)
			bar.finish()
			if err != nil {
				if res.Run.ID == "" {
					// Nothing started: the job could not be opened or planned.
					return invalid(err)
				}
				return err
			}
			res.WriteSummary(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().IntVar(&parallel, "parallel", 0, "shards processed at once (0: by the model's device: 2 on a CPU, which hides each shard's start and commit behind another's work; on a GPU half the cores, 4 to 16, reading and encoding ahead of its sessions)")
	cmd.Flags().BoolVar(&restart, "restart", false, "abandon an unfinished run whose spec or model changed and start a new one")
	cmd.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar, even on a terminal")
	cmd.Flags().StringVar(&ui, "ui", "", "serve the dashboard's pages for this run on this address while it runs, e.g. :4040 (tokens as for precog dashboard: PRECOG_API_TOKENS)")
	cmd.Flags().StringVar(&db, "db", "", "use the Postgres ledger at this URL: join the open run of the job and params (workers may be on it) or create one, and work on it here; never printed")
	cmd.Flags().StringVar(&metrics, "metrics-addr", "", "serve Prometheus metrics (rows, shards, stage busy time) on this address, e.g. :9090")
	return cmd
}
