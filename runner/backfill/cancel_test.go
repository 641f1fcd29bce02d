package backfill

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
)

// TestCancelByIDEmbedded: on the embedded ledger CancelByID closes the
// ledger (once) and cancels each open value's run as precog cancel RUN
// does there (runner.CancelLocal); a succeeded value is left alone; the
// report names each run's state and the backfill's open values. An id
// that names no backfill is not one (ok false), the ledger closed too.
func TestCancelByIDEmbedded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	led := boltLedger(t, dir)
	b := seedBackfill(t, led, "j-bf-1", "2026-11-01", "2026-11-02", "2026-11-03")
	setState(t, led, "r2026-11-02", jobs.RunSucceeded, "")
	closes := 0
	p := CancelParams{Ledger: led, Close: func() error { closes++; return led.Close() }, StateDir: dir, ID: b.ID}
	c, ok, err := CancelByID(ctx, p)
	if !ok || err != nil || closes != 1 {
		t.Fatalf("CancelByID = %v, %v after %d closes; want a backfill, nil, 1 close", ok, err, closes)
	}
	var out strings.Builder
	if err := c.Report(&out); err != nil {
		t.Fatalf("Report: %v\n%s", err, out.String())
	}
	want := "run r2026-11-01 cancelled\nthe run recorded no spec: its sinks were not cleaned\n" +
		"run r2026-11-03 cancelled\nthe run recorded no spec: its sinks were not cleaned\n" +
		"backfill j-bf-1 cancelled: 2 open value(s) cancelled\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	after := boltLedger(t, dir)
	for id, state := range map[string]jobs.RunState{"r2026-11-01": jobs.RunCancelled, "r2026-11-02": jobs.RunSucceeded, "r2026-11-03": jobs.RunCancelled} {
		if r, err := after.Run(ctx, id); err != nil || r.State != state {
			t.Errorf("run %s: %s, %v; want %s", id, r.State, err, state)
		}
	}
	if bf, err := after.Backfill(ctx, b.ID); err != nil || !bf.Cancelled {
		t.Errorf("backfill after cancel: cancelled %v, %v", bf.Cancelled, err)
	}
	p.Ledger, p.ID, closes = after, "r2026-11-01", 0
	p.Close = func() error { closes++; return nil }
	if _, ok, err := CancelByID(ctx, p); ok || err != nil || closes != 1 {
		t.Errorf("CancelByID(a run id) = %v, %v after %d closes; want not a backfill, nil, 1 close", ok, err, closes)
	}
}

// TestCancelByIDShared: on the Postgres ledger each open run is cancelled
// through the ledger the backfill was read from; a run in its publish
// step is refused (a *runner.RefusedError, exit 2, of ledger.ErrPublishing,
// named in the report's error)
// while the others are cancelled and the backfill is marked cancelled.
func TestCancelByIDShared(t *testing.T) {
	ctx := context.Background()
	led := pgLedger(t)
	b := seedBackfill(t, led, "j-bf-1", "2026-11-01", "2026-11-02")
	// r2026-11-02 reaches its publish step: its one shard committed, the
	// publish leased.
	sh, err := led.Claim(ctx, "r2026-11-02", "w1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.Complete(ctx, ledger.CompleteParams{RunID: "r2026-11-02", Shard: sh.Index, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: "r2026-11-02", Worker: "w1", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := CancelByID(ctx, CancelParams{Ledger: led, Close: func() error { return nil }, ID: b.ID,
		Options: runner.CancelOptions{CleanAgain: true}})
	if !ok || err != nil || !c.Shared {
		t.Fatalf("CancelByID = %+v, %v, %v", c, ok, err)
	}
	var out strings.Builder
	err = c.Report(&out)
	var refused *runner.RefusedError
	if !errors.Is(err, ledger.ErrPublishing) || !errors.As(err, &refused) || !strings.Contains(err.Error(), "run r2026-11-02 is publishing") {
		t.Errorf("Report's error = %v, want the publishing run named", err)
	}
	if want := "run r2026-11-01 cancelled\nthe run recorded no spec: its sinks were not cleaned\nbackfill j-bf-1 cancelled: 2 open value(s) cancelled\n"; out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	if r, err := led.Run(ctx, "r2026-11-01"); err != nil || r.State != jobs.RunCancelled {
		t.Errorf("r2026-11-01: %s, %v; want cancelled", r.State, err)
	}
	if r, err := led.Run(ctx, "r2026-11-02"); err != nil || r.State != jobs.RunPublishing {
		t.Errorf("r2026-11-02: %s, %v; want still publishing", r.State, err)
	}
	if bf, err := led.Backfill(ctx, b.ID); err != nil || !bf.Cancelled {
		t.Errorf("backfill after cancel: cancelled %v, %v", bf.Cancelled, err)
	}
}

// pgLedger is a Postgres ledger on a fresh server's database, polling
// (no LISTEN), closed with the test.
func pgLedger(t *testing.T) *postgres.Ledger {
	t.Helper()
	led, err := postgres.Open(context.Background(), testservers.Postgres(t).DSN, postgres.Options{PollOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	return led
}
