package dashboard

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// actionRun creates a run of n shards, one of them failed (attempts
// spent) when failOne.
func actionRun(t *testing.T, led ledger.Ledger, id string, n int, failOne bool) {
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

// TestLocalActions: over the embedded ledger (closed between actions, as
// a precog run may hold it), Retry puts an open run's failed shard back
// to pending and runs nothing, Cancel cancels as precog cancel does, a
// retry of a cancelled run is refused and an unknown run is named.
func TestLocalActions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	actionRun(t, l, "r-open", 3, true)
	actionRun(t, l, "r-cancel", 1, false)
	l.Close()
	acts := LocalActions(dir, slog.New(slog.DiscardHandler))
	msg, err := acts.Retry(ctx, "r-open")
	if err != nil || !strings.Contains(msg, "1 failed shard(s) back to pending") {
		t.Fatalf("retry = %q, %v", msg, err)
	}
	if msg, err := acts.Cancel(ctx, "r-cancel"); err != nil || msg != "run r-cancel cancelled" {
		t.Fatalf("cancel = %q, %v", msg, err)
	}
	if _, err := acts.Retry(ctx, "r-cancel"); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("retry of a cancelled run = %v, want a refusal", err)
	}
	if _, err := acts.Retry(ctx, "r-none"); err == nil || err.Error() != "run r-none: not found in "+dir+" (see precog runs)" {
		t.Errorf("retry of an unknown run = %v", err)
	}
	l, err = bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if r, _ := l.Run(ctx, "r-cancel"); r.State != jobs.RunCancelled {
		t.Errorf("cancelled run is %s", r.State)
	}
	for _, sh := range mustShards(t, l, "r-open") {
		if sh.State != jobs.ShardPending {
			t.Errorf("shard %d is %s: the dashboard ran the run", sh.Index, sh.State)
		}
	}
}

// TestServeRunUI: without tokens a run's pages are served on a loopback
// address only; stop returns once the server is down.
func TestServeRunUI(t *testing.T) {
	dir := t.TempDir()
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := RunUIParams{Addr: "0.0.0.0:0", Ledger: l, StateDir: dir, Logger: slog.New(slog.DiscardHandler)}
	if _, err := ServeRunUI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "set PRECOG_API_TOKENS, or listen on a loopback address") {
		t.Errorf("no tokens on 0.0.0.0: %v, want a refusal", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		p.Addr = addr
		stop, err := ServeRunUI(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		stop()
	}
	p.Addr, p.Tokens = "0.0.0.0:0", []string{token}
	stop, err := ServeRunUI(context.Background(), p)
	if err != nil {
		t.Fatalf("with a token on 0.0.0.0: %v", err)
	}
	stop()
	if got := URL(":4040"); got != "http://localhost:4040/" {
		t.Errorf("URL(:4040) = %s", got)
	}
}

func mustShards(t *testing.T, l ledger.Ledger, run string) []jobs.Shard {
	t.Helper()
	sh, err := l.Shards(context.Background(), run)
	if err != nil || len(sh) == 0 {
		t.Fatalf("shards of %s: %d, %v", run, len(sh), err)
	}
	return sh
}
