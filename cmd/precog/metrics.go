package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/precog-ml/precog/runner"
)

// serveMetrics exposes the batch runner's Prometheus metrics on addr (":9090")
// for the life of ctx, so a scheduler or an operator can watch a long run.
// It returns once the listener is bound, so a bad address fails the command.
func serveMetrics(ctx context.Context, addr string, log *slog.Logger) (stop func(), err error) {
	return serveOps(ctx, "--metrics-addr", addr, log, nil, runner.Metrics()...)
}

// readyTimeout bounds a readiness check (a probe's own timeout is
// usually a few seconds).
const readyTimeout = 2 * time.Second

// serveOps serves /healthz, /readyz (ready says why the process is not
// ready, in the 503's body; nil: always ready) and /metrics (the Go and
// process collectors plus extra) on addr for a long-running command
// (worker, scheduler). flag names the address flag in errors. It returns
// once the listener is bound.
func serveOps(ctx context.Context, flag, addr string, log *slog.Logger, ready func(ctx context.Context) error, extra ...prometheus.Collector) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			rctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			err := ready(rctx)
			cancel()
			if err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, invalid(fmt.Errorf("%s: %w", flag, err))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("ops http server", "err", err)
		}
	}()
	log.Info("serving /healthz, /readyz, /metrics", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
