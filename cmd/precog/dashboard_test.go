package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
)

// dashRun creates a run of n shards with one shard failed (attempts spent).
func dashRun(t *testing.T, led ledger.Ledger, id string, n int, failOne bool) {
	t.Helper()
	ctx := context.Background()
	params := map[string]string{"id": id}
	r := jobs.Run{ID: id, Job: "dash", Version: "v-" + id, Params: params, ParamsKey: jobs.ParamsKey(params), SpecHash: "h", ModelVersion: "m"}
	shards := make([]jobs.Shard, n)
	for i := range shards {
		shards[i] = jobs.Shard{RunID: id, Index: i, Plan: []byte(`{}`), EstRows: 10}
	}
	if err := led.CreateRun(ctx, r, shards); err != nil {
		t.Fatal(err)
	}
	if failOne {
		sh, err := led.Claim(ctx, id, "w1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := led.Fail(ctx, ledger.FailParams{RunID: id, Shard: sh.Index, Worker: "w1", Msg: "boom", Retry: false, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDashboardActions: the dashboard's buttons run precog cancel's and
// precog retry's code on the Postgres ledger (the embedded ledger's are
// dashboard.LocalActions, tested there).
func TestDashboardActions(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	t.Run("postgres", func(t *testing.T) {
		pg := testservers.Postgres(t)
		l, err := postgres.Open(ctx, pg.DSN, open.ForCommand(log).Postgres)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		led := &openedLedger{Store: l, cluster: l, where: "the Postgres ledger"}
		dashRun(t, l, "r-cancel", 2, false)
		dashRun(t, l, "r-failed", 2, true)
		if err := l.SetRunState(ctx, "r-failed", jobs.RunFailed, "1 shard failed"); err != nil {
			t.Fatal(err)
		}
		acts := clusterActions(led, time.Second, log)
		msg, err := acts.Cancel(ctx, "r-cancel")
		if err != nil || !strings.Contains(msg, "run r-cancel cancelled") {
			t.Fatalf("cancel = %q, %v", msg, err)
		}
		if r, _ := l.Run(ctx, "r-cancel"); r.State != jobs.RunCancelled {
			t.Errorf("cancelled run is %s", r.State)
		}
		if _, err := acts.Cancel(ctx, "r-failed"); err == nil || !strings.Contains(err.Error(), "failed") {
			t.Errorf("cancel of a failed run = %v, want a refusal", err)
		}
		// Retry reopens the failed run (RetryRun) with its failed shard pending.
		msg, err = acts.Retry(ctx, "r-failed")
		if err != nil || !strings.Contains(msg, "1 failed shard(s) back to pending") {
			t.Fatalf("retry = %q, %v", msg, err)
		}
		if r, _ := l.Run(ctx, "r-failed"); r.State.Terminal() {
			t.Errorf("retried run is still %s", r.State)
		}
	})
}

// TestDashboardRefusesWithoutTokens: no token and no --insecure-no-auth is
// exit 2 with a message saying what to do; a tokens file that does not
// exist is exit 2 too.
func TestDashboardRefusesWithoutTokens(t *testing.T) {
	t.Setenv("PRECOG_API_TOKENS", "")
	t.Setenv(envDatabaseURL, "")
	dir := t.TempDir()
	r := precog(t, dir, "dashboard", "--addr", "127.0.0.1:0")
	if r.code != exitInvalid || !strings.Contains(r.stderr, "--insecure-no-auth") {
		t.Errorf("dashboard without tokens: exit %d\n%s", r.code, r.stderr)
	}
	r = precog(t, dir, "dashboard", "--addr", "127.0.0.1:0", "--tokens-file", filepath.Join(dir, "none"))
	if r.code != exitInvalid || !strings.Contains(r.stderr, "--tokens-file") {
		t.Errorf("dashboard with a missing tokens file: exit %d\n%s", r.code, r.stderr)
	}
}
