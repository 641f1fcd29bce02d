package bolt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/ledgertest"
)

func TestConformance(t *testing.T) {
	ledgertest.Exercise(t, func(t *testing.T) ledger.Store {
		l, err := Open(filepath.Join(t.TempDir(), ".precog", "ledger.db"))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		l.PollInterval = time.Hour // the suite tells notices from polls
		return l
	})
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	run := jobs.Run{ID: "r1", Job: "recs", Version: "v1", ParamsKey: "date=2024-11-01"}
	if err := l.CreateRun(ctx, run, []jobs.Shard{{Index: 0}, {Index: 1}, {Index: 2}}); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	s, err := l.Claim(ctx, "r1", "w1", time.Minute)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: "r1", Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 10, RowsOut: 9, Rejected: 1}}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, err := l.Claim(ctx, "r1", "w1", time.Minute); err != nil { // shard 1 left leased by a "dead" worker
		t.Fatalf("Claim: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	l, err = Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer l.Close()
	got, err := l.OpenRun(ctx, "recs", "date=2024-11-01")
	if err != nil || got.ID != "r1" || got.State != jobs.RunRunning || got.Counts.RowsOut != 9 {
		t.Fatalf("OpenRun after reopen = %+v, %v; want r1 running with RowsOut 9", got, err)
	}
	ss, err := l.Shards(ctx, "r1")
	if err != nil {
		t.Fatalf("Shards: %v", err)
	}
	if ss[0].State != jobs.ShardCommitted || ss[1].State != jobs.ShardRunning || ss[2].State != jobs.ShardPending {
		t.Fatalf("shard states after reopen = %s %s %s, want committed running pending", ss[0].State, ss[1].State, ss[2].State)
	}
}

// TestHeldFileIsBusy: a transaction waits for another holder of the file
// for the ledger's lock wait, then fails with ledger.ErrBusy naming the
// state dir; once the holder lets go the ledger works. (Two Ledgers of one
// file share it: TestKillAfterComplete, with a second process.)
func TestHeldFileIsBusy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".precog")
	path := filepath.Join(dir, "ledger.db")
	l, err := OpenWait(path, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	// A raw bbolt open holds the file's lock for as long as it stays open,
	// as a frozen process inside a transaction (or an older precog) would.
	// (The ledger wrote nothing yet: its file does not exist.)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = l.CreateRun(context.Background(), jobs.Run{ID: "r1", Job: "recs"}, []jobs.Shard{{Index: 0}})
	if !errors.Is(err, ledger.ErrBusy) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("CreateRun while the file is held = %v, want ErrBusy naming %s", err, dir)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateRun(context.Background(), jobs.Run{ID: "r1", Job: "recs"}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatalf("CreateRun once the holder let go: %v", err)
	}
}

// TestNoFileReadsEmpty: a ledger opened where no file exists reads as an
// empty ledger and creates nothing (not even the state dir), so that a
// read-only command on a state dir where nothing ran leaves no ledger
// behind; its first write creates the file, which then reads back.
func TestNoFileReadsEmpty(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	l, err := OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if runs, err := l.Runs(ctx, "", 10); err != nil || len(runs) != 0 {
		t.Fatalf("Runs of a ledger without a file = %v, %v; want none", runs, err)
	}
	if _, err := l.Run(ctx, "r1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Run of a ledger without a file = %v, want ErrNotFound", err)
	}
	if ws, err := l.ListWorkers(ctx, ""); err != nil || len(ws) != 0 {
		t.Fatalf("ListWorkers of a ledger without a file = %v, %v; want none", ws, err)
	}
	if bs, err := l.Backfills(ctx, "", 10); err != nil || len(bs) != 0 {
		t.Fatalf("Backfills of a ledger without a file = %v, %v; want none", bs, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reads created %s: %v", dir, err)
	}
	if err := l.CreateRun(ctx, jobs.Run{ID: "r1", Job: "recs"}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PathIn(dir)); err != nil {
		t.Fatalf("the first write created no file: %v", err)
	}
	again, err := OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if r, err := again.Run(ctx, "r1"); err != nil || r.ID != "r1" {
		t.Fatalf("Run after the first write = %+v, %v", r, err)
	}
}
