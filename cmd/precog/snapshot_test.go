package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner/backfill"
)

// TestSnapshotViews: `precog status` prints a backfill's table and a run's
// JSON from the embedded ledger's snapshot while the ledger is busy (the
// views themselves: backfill.TestSnapshotViews).
func TestSnapshotViews(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.Now().UTC()
	if err := l.CreateRun(ctx, jobs.Run{ID: "solo", Job: "recs", ParamsKey: "a", CreatedAt: now}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	var children []ledger.BackfillRun
	for i, v := range []string{"2024-11-01", "2024-11-02"} {
		children = append(children, ledger.BackfillRun{Value: v, Run: jobs.Run{ID: "d" + v, Job: "users", ParamsKey: "date=" + v, CreatedAt: now.Add(time.Duration(i+1) * time.Second)}, Shards: []jobs.Shard{{Index: 0}}})
	}
	b := ledger.Backfill{ID: "bf", Job: "users", Param: "date", From: "2024-11-01", To: "2024-11-02", Step: "1d", Parallel: 2, CreatedAt: now}
	if err := l.CreateBackfill(ctx, b, children); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRunState(ctx, "d2024-11-01", jobs.RunFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	keep, err := l.KeepSnapshots(ctx, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	keep.Stop()

	s, ok := backfill.ReadSnapshot(dir)
	if !ok {
		t.Fatal("no snapshot of this (live) process")
	}
	var out bytes.Buffer
	if err := printSnapshotStatus(s, "bf", &out, false); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "backfill bf") || !strings.Contains(got, "failed") || !strings.Contains(got, "boom") {
		t.Fatalf("status bf from the snapshot:\n%s", got)
	}
	out.Reset()
	if err := printSnapshotStatus(s, "solo", &out, true); err != nil || !strings.Contains(out.String(), `"id":"solo"`) {
		t.Fatalf("status solo --json from the snapshot: %v\n%s", err, out.String())
	}
}
