package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/opsserver"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/model"
)

func newWorkerCmd(g *globals) *cobra.Command {
	var (
		opts       runner.WorkerOptions
		devices    string
		db         string
		addr       string
		pollOnly   bool
		ledgerWait time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker [--pool NAME] [--devices cpu,cuda:0,…]",
		Short: "Join a worker pool and execute shards of submitted runs until stopped",
		Long: `Join a pool of workers that share runs through the Postgres ledger (--db or
PRECOG_DATABASE_URL): claim shards of any run submitted to the pool (highest
priority first; runs of equal priority share the pool), execute them with the
same pipeline as precog run, and publish a run when its last shard commits.

Each device works on --parallel shards at once (one claim loop each; by
default 2 on a CPU, and on a GPU half the cores, shared among the worker's
GPUs, 4 to 16: a GPU's model leaves the cores free to read, encode and
write ahead of it). A worker needs only the database, its
environment (the secrets the job specs reference as ${VAR}) and read access to
the models and data; it reads each run's spec from the ledger, and refuses the
shards of a run whose model file here differs from the one submitted.

SIGTERM (or Ctrl-C) drains: no new shards are claimed, in-flight shards finish
within --drain-timeout or are released for another worker, and the worker exits 0.
--addr serves /healthz, /readyz and /metrics. /readyz answers 200 only while the
worker can work: not draining, its ledger role holds the privileges claims
need (checked without claiming), and its last claim did not fail; the 503's
body says why. precog_pool_ledger_up follows the same rule.`,
		Example: `  export PRECOG_DATABASE_URL=postgres://precog@db/precog
  precog worker                                      # pool "default", device cpu
  precog worker --pool gpu --devices cuda:0,cuda:1 --addr :9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := jobs.ValidatePool(opts.Pool); err != nil {
				return invalid(fmt.Errorf("--pool: %w", err))
			}
			var err error
			if opts.Devices, err = model.CheckDevices(devices); err != nil {
				return invalid(fmt.Errorf("--devices: %w", err))
			}
			if opts.Parallel < 0 {
				return invalid(fmt.Errorf("--parallel: must be >= 0 (got %d; 0 picks by the device)", opts.Parallel))
			}
			if opts.RejectsPerRun <= 0 {
				return invalid(errors.New("--max-stored-rejects must be > 0"))
			}
			led, err := openCluster(cmd.Context(), databaseURL(db), open.Options{Postgres: pgledger.Options{PollOnly: pollOnly, Logger: g.log, RejectsPerRun: opts.RejectsPerRun}, WaitUnreachable: ledgerWait})
			if err != nil {
				return err
			}
			defer led.Close()
			opts.Logger, opts.StateDir = g.log, g.stateDir
			w := runner.NewWorker(led, opts)
			// Ready means able to work: not draining, and able to claim.
			stop, err := opsserver.Serve(cmd.Context(), opsserver.Params{Addr: addr, Flag: "--addr", Log: g.log, Ready: w.Probe, Collectors: w.Metrics()})
			if err != nil {
				return invalid(err)
			}
			defer stop()
			err = w.Run(cmd.Context())
			g.log.Info("worker stopped")
			return err
		},
	}
	addDBFlag(cmd, &db)
	f := cmd.Flags()
	f.StringVar(&opts.Pool, "pool", jobs.DefaultPool, "worker pool to serve (a job spec's pool field)")
	f.StringVar(&devices, "devices", jobs.DeviceCPU, "devices to run shards on: cpu, cuda:0, cuda:1, …")
	f.IntVar(&opts.Parallel, "parallel", 0, "shards in flight per device (0: by the device: 2 on a CPU; on a GPU half the cores shared among the worker's GPUs, 4 to 16)")
	f.StringVar(&addr, "addr", "", "serve /healthz, /readyz and /metrics on this address, e.g. :9090")
	f.DurationVar(&ledgerWait, "ledger-wait", 2*time.Minute, "how long a starting worker retries an unreachable Postgres ledger (a restart, a failover) before it exits 75; 0: exit at once")
	f.BoolVar(&pollOnly, "poll-only", false, "do not LISTEN for notices, poll the ledger (PgBouncer in transaction mode)")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", time.Minute, "on SIGTERM, how long in-flight shards may finish before they are released")
	f.DurationVar(&opts.StallTimeout, "stall-timeout", runner.DefaultStallTimeout, "fail an attempt that read no row for this long (its heartbeats notwithstanding)")
	f.DurationVar(&opts.Lease, "lease", 30*time.Second, "shard lease; renewed every third of it")
	f.IntVar(&opts.OpenRuns, "open-runs", 4, "runs kept open (sinks connected and prepared) per device")
	f.IntVar(&opts.RejectsPerRun, "max-stored-rejects", ledger.DefaultRejectsPerRun, "rejected rows of one run stored in the ledger (precog rejects); past it they are counted, not stored")
	f.IntVar(&opts.Models, "models", 2, "loaded models kept per device beyond those open runs use, shared by runs of the same model file, spec and device (LRU)")
	return cmd
}
