package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
)

func newWorkerCmd(g *globals) *cobra.Command {
	var (
		opts     runner.WorkerOptions
		devices  string
		db       string
		addr     string
		pollOnly bool
	)
	cmd := &cobra.Command{
		Use:   "worker [--pool NAME] [--devices cpu,cuda:0,…]",
		Short: "Join a worker pool and execute shards of submitted runs until stopped",
		Long: `Join a pool of workers that share runs through the Postgres ledger (--db or
PRECOG_DATABASE_URL): claim shards of any run submitted to the pool (highest
priority first; runs of equal priority share the pool), execute them with the
same pipeline as precog run, and publish a run when its last shard commits.

One claim loop runs per device. A worker needs only the database, its
environment (the secrets the job specs reference as ${VAR}) and read access to
the models and data; it reads each run's spec from the ledger, and refuses the
shards of a run whose model file here differs from the one submitted.

SIGTERM (or Ctrl-C) drains: no new shards are claimed, in-flight shards finish
within --drain-timeout or are released for another worker, and the worker exits 0.
--addr serves /healthz, /readyz and /metrics.`,
		Example: `  export PRECOG_DATABASE_URL=postgres://precog@db/precog
  precog worker                                      # pool "default", device cpu
  precog worker --pool gpu --devices cuda:0,cuda:1 --addr :9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := jobs.ValidatePool(opts.Pool); err != nil {
				return invalid(fmt.Errorf("--pool: %w", err))
			}
			for _, d := range strings.Split(devices, ",") {
				if d = strings.TrimSpace(d); d != "" {
					opts.Devices = append(opts.Devices, d)
				}
			}
			led, err := openCluster(cmd.Context(), databaseURL(db), pgledger.Options{PollOnly: pollOnly, Logger: g.log})
			if err != nil {
				return err
			}
			defer led.Close()
			opts.Logger, opts.StateDir = g.log, g.stateDir
			var ready atomic.Bool
			stop, err := serveWorkerHTTP(cmd.Context(), addr, g, &ready)
			if err != nil {
				return err
			}
			defer stop()
			ready.Store(true)
			err = runner.NewWorker(led, opts).Run(cmd.Context())
			ready.Store(false)
			g.log.Info("worker stopped")
			return err
		},
	}
	addDBFlag(cmd, &db)
	f := cmd.Flags()
	f.StringVar(&opts.Pool, "pool", jobs.DefaultPool, "worker pool to serve (a job spec's pool field)")
	f.StringVar(&devices, "devices", "cpu", "devices, one claim loop each: cpu, cuda:0, cuda:1, …")
	f.StringVar(&addr, "addr", "", "serve /healthz, /readyz and /metrics on this address, e.g. :9090")
	f.BoolVar(&pollOnly, "poll-only", false, "do not LISTEN for notices, poll the ledger (PgBouncer in transaction mode)")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", time.Minute, "on SIGTERM, how long in-flight shards may finish before they are released")
	f.DurationVar(&opts.StallTimeout, "stall-timeout", runner.DefaultStallTimeout, "fail an attempt that read no row for this long (its heartbeats notwithstanding)")
	f.DurationVar(&opts.Lease, "lease", 30*time.Second, "shard lease; renewed every third of it")
	f.IntVar(&opts.OpenRuns, "open-runs", 4, "runs kept open (models loaded, sinks connected) per device")
	return cmd
}

// serveWorkerHTTP serves the worker's health, readiness and metrics.
func serveWorkerHTTP(ctx context.Context, addr string, g *globals, ready *atomic.Bool) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(runner.Metrics()...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, invalid(fmt.Errorf("--addr: %w", err))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Warn("worker http server", "err", err)
		}
	}()
	g.log.Info("worker http", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
