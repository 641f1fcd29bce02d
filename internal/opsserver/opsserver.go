// Package opsserver serves the operations endpoints of a long-running
// precog process (run --metrics-addr, worker, scheduler): /healthz,
// /readyz and /metrics.
package opsserver

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
)

// readyTimeout bounds a readiness check (a probe's own timeout is
// usually a few seconds).
const readyTimeout = 2 * time.Second

// Params say what to serve where.
type Params struct {
	Addr string
	// Flag is the option that set Addr (--addr, --metrics-addr): Serve's
	// error names it, as a usage error of the command that serves.
	Flag string
	Log  *slog.Logger
	// Ready says why the process is not ready, in the 503's body; nil:
	// always ready.
	Ready func(ctx context.Context) error
	// Collectors join the Go and process collectors on /metrics.
	Collectors []prometheus.Collector
}

// Serve serves /healthz, /readyz and /metrics on p.Addr until stop (or
// ctx's end, through stop). It returns once the listener is bound, so a
// bad address fails at once; an empty address serves nothing.
func Serve(ctx context.Context, p Params) (stop func(), err error) {
	if p.Addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		if p.Flag != "" {
			err = fmt.Errorf("%s: %w", p.Flag, err)
		}
		return nil, err
	}
	return serve(ctx, ln, p), nil
}

// serve serves on ln until stop.
func serve(ctx context.Context, ln net.Listener, p Params) (stop func()) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(p.Collectors...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if p.Ready != nil {
			rctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			err := p.Ready(rctx)
			cancel()
			if err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.Log.Warn("ops http server", "err", err)
		}
	}()
	p.Log.Info("serving /healthz, /readyz, /metrics", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
}
