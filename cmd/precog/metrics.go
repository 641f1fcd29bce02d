package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/precog-ml/precog/internal/opsserver"
	"github.com/precog-ml/precog/runner"
)

// serveMetrics exposes the batch runner's Prometheus metrics on addr (":9090")
// for the life of ctx, so a scheduler or an operator can watch a long run.
// It returns once the listener is bound, so a bad address fails the command.
func serveMetrics(ctx context.Context, addr string, log *slog.Logger) (stop func(), err error) {
	return serveOps(ctx, "--metrics-addr", addr, log, nil, runner.Metrics()...)
}

// serveOps serves opsserver's /healthz, /readyz and /metrics on addr for
// a long-running command (worker, scheduler); flag names the address flag
// in errors (a bad address is a usage error).
func serveOps(ctx context.Context, flag, addr string, log *slog.Logger, ready func(ctx context.Context) error, extra ...prometheus.Collector) (stop func(), err error) {
	stop, err = opsserver.Serve(ctx, opsserver.Params{Addr: addr, Log: log, Ready: ready, Collectors: extra})
	if err != nil {
		return nil, invalid(fmt.Errorf("%s: %w", flag, err))
	}
	return stop, nil
}
