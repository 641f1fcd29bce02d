package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/precog-ml/precog/jobs/ledger"
)

// URL is the address people open for a listen address: ":8081" is
// localhost's.
func URL(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "http://localhost" + addr + "/"
	}
	return "http://" + addr + "/"
}

// RunUIParams are what ServeRunUI serves.
type RunUIParams struct {
	// Addr is the listen address (precog run --ui).
	Addr string
	// Ledger is the run's embedded ledger, opened by the run's process
	// and shared with the run; StateDir is where it lives.
	Ledger   ledger.Store
	StateDir string
	// Tokens are the accepted bearer tokens; without any the pages are
	// served without authentication, on a loopback address only.
	Tokens []string
	Logger *slog.Logger
}

// ServeRunUI serves the dashboard over the embedded ledger of a local run
// while it executes (precog run --ui ADDR, as the Spark UI on :4040),
// without actions, until stop; it outlives ctx's cancellation so that the
// pages show the run's end (stop ends it). A listen error is logged. Its
// errors are the parameters' (a usage error).
func ServeRunUI(ctx context.Context, p RunUIParams) (stop func(), err error) {
	host, _, _ := net.SplitHostPort(p.Addr)
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if len(p.Tokens) == 0 && !loopback {
		return nil, fmt.Errorf("--ui %s: set PRECOG_API_TOKENS, or listen on a loopback address (127.0.0.1:4040) to serve without authentication", p.Addr)
	}
	srv, err := New(Options{Source: Shared{L: p.Ledger, Name: "this run (" + p.StateDir + ")"},
		StateDir: p.StateDir, Tokens: p.Tokens, InsecureNoAuth: len(p.Tokens) == 0, Logger: p.Logger})
	if err != nil {
		return nil, err
	}
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ListenAndServe(uctx, p.Addr); err != nil {
			srv.opts.Logger.Warn("--ui server", "err", err)
		}
	}()
	srv.opts.Logger.Info("dashboard for this run", "url", URL(p.Addr))
	return func() { cancel(); <-done }, nil
}
