package bolt

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestSnapshots: KeepSnapshots writes the ledger's runs, shards and
// backfills at once and a last time at Stop, beside the ledger's file;
// ReadSnapshot returns it while its writer lives, and nothing when there is
// none or its writer is gone.
func TestSnapshots(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	if _, ok := ReadSnapshot(dir); ok {
		t.Fatal("ReadSnapshot of a state dir without one: ok")
	}
	l, err := OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	solo := jobs.Run{ID: "solo", Job: "recs", ParamsKey: "a", CreatedAt: time.Now().UTC()}
	if err := l.CreateRun(ctx, solo, []jobs.Shard{{Index: 0}, {Index: 1}}); err != nil {
		t.Fatal(err)
	}
	child := ledger.BackfillRun{Value: "2024-11-01", Run: jobs.Run{ID: "child", Job: "users", ParamsKey: "date=2024-11-01", CreatedAt: time.Now().UTC()}, Shards: []jobs.Shard{{Index: 0}}}
	if err := l.CreateBackfill(ctx, ledger.Backfill{ID: "bf", Job: "users", Param: "date", From: "2024-11-01", To: "2024-11-01", Step: "1d", Parallel: 1}, []ledger.BackfillRun{child}); err != nil {
		t.Fatal(err)
	}
	keep, err := l.KeepSnapshots(ctx, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	s, ok := ReadSnapshot(dir)
	if !ok {
		keep.Stop()
		t.Fatal("no snapshot after KeepSnapshots")
	}
	if s.PID != os.Getpid() || len(s.Runs) != 2 || len(s.Shards["solo"]) != 2 || len(s.Backfills) != 1 || s.BackfillOf["child"] != "bf" || s.BackfillOf["solo"] != "" {
		keep.Stop()
		t.Fatalf("first snapshot: %+v", s)
	}
	late := jobs.Run{ID: "late", Job: "items", ParamsKey: "a", CreatedAt: time.Now().UTC()}
	if err := l.CreateRun(ctx, late, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	keep.Kick()
	keep.Stop()
	if s, ok = ReadSnapshot(dir); !ok || len(s.Runs) != 3 {
		t.Fatalf("the snapshot written at Stop: %v %+v, want the late run too", ok, s.Runs)
	}

	// A snapshot whose writer ended is not shown: the ledger is free.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("no process to outlive: %v", err)
	}
	s.PID = dead.Process.Pid
	b, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, SnapshotFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := ReadSnapshot(dir); ok {
		t.Fatalf("ReadSnapshot of a snapshot by ended process %d: ok", s.PID)
	}
}
