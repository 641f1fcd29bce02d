package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/precog-ml/precog/internal/testservers"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
)

// TestReadyNeedsClaimPrivileges: a worker whose ledger role can only read
// is not ready (saying which privileges it lacks) and its
// precog_pool_ledger_up is 0, though the ledger answers; its failed claims
// keep it unready. Granted the privileges, it becomes ready once a claim
// succeeds.
func TestReadyNeedsClaimPrivileges(t *testing.T) {
	ctx := context.Background()
	pg := testservers.Postgres(t)
	clusterLedgerOn(t, pg.DSN)         // the owner migrates the schema
	role := "precog_ro_" + pg.Database // roles are cluster-wide
	pg.Exec(t, `CREATE ROLE "`+role+`" LOGIN`)
	t.Cleanup(func() {
		pg.Exec(t, `DROP OWNED BY "`+role+`"`)
		pg.Exec(t, `DROP ROLE "`+role+`"`)
	})
	pg.Exec(t, `GRANT USAGE, CREATE ON SCHEMA public TO "`+role+`"`)
	pg.Exec(t, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO "`+role+`"`)
	u := url.URL{Scheme: "postgres", User: url.User(role), Host: fmt.Sprintf("%s:%d", pg.Host, pg.Port), Path: "/" + pg.Database, RawQuery: "sslmode=disable"}
	led := clusterLedgerOn(t, u.String())

	w := NewWorker(led, WorkerOptions{Pool: "default", Logger: slog.New(slog.DiscardHandler)})
	pc := w.Metrics()[len(w.Metrics())-1]
	if err := w.Ready(ctx); !errors.Is(err, pgledger.ErrCannotClaim) || !strings.Contains(err.Error(), "UPDATE on precog_run_shards") {
		t.Fatalf("Ready of a SELECT-only worker = %v; want ErrCannotClaim naming UPDATE on precog_run_shards", err)
	}
	if up := upValue(t, pc); up != 0 {
		t.Fatalf("precog_pool_ledger_up = %v for a worker that cannot claim; want 0", up)
	}

	// Its claims fail: that keeps it unready, whatever the privileges say.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	waitFor(t, "a failed claim", 30*time.Second, func() bool { return w.claimErr.Load() != nil })
	if p := w.claimErr.Load(); !strings.Contains((*p).Error(), "permission denied") {
		t.Fatalf("the failed claim: %v, want permission denied", *p)
	}
	pg.Exec(t, `GRANT UPDATE ON precog_runs, precog_run_shards TO "`+role+`"`)
	waitFor(t, "ready after the grants", time.Minute, func() bool { return w.Ready(ctx) == nil })
	if up := upValue(t, pc); up != 1 {
		t.Fatalf("precog_pool_ledger_up = %v once the worker can claim; want 1", up)
	}
}

// clusterLedgerOn opens the Postgres ledger at dsn, closed at cleanup.
func clusterLedgerOn(t *testing.T, dsn string) *pgledger.Ledger {
	t.Helper()
	led, err := pgledger.Open(context.Background(), dsn, pgledger.Options{PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	return led
}

// upValue collects c and returns precog_pool_ledger_up.
func upValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	up := -1.0
	for m := range ch {
		if !strings.Contains(m.Desc().String(), `"precog_pool_ledger_up"`) {
			continue
		}
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		up = d.GetGauge().GetValue()
	}
	if up < 0 {
		t.Fatal("no precog_pool_ledger_up collected")
	}
	return up
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProbeFollowsRun: precog worker's /readyz is not ready before Run,
// Ready's answer while it works, and not ready again as soon as its
// context ends (draining) and after Run returns.
func TestProbeFollowsRun(t *testing.T) {
	ctx := context.Background()
	w := NewWorker(clusterLedger(t), WorkerOptions{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	notRunning := func() bool {
		err := w.Probe(ctx)
		return err != nil && strings.Contains(err.Error(), "not running (starting or draining)")
	}
	if !notRunning() {
		t.Fatalf("Probe before Run = %v, want not running", w.Probe(ctx))
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	waitFor(t, "ready while running", time.Minute, func() bool { return w.Probe(ctx) == nil })
	stop()
	waitFor(t, "not ready once draining", time.Minute, notRunning)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !notRunning() {
		t.Errorf("Probe after Run = %v, want not running", w.Probe(ctx))
	}
}
