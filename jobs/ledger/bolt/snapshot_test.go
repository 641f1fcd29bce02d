package bolt

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestSnapshotOfAnotherFormat: a snapshot file an older precog wrote (the
// unversioned file of views, met while upgrading under a running backfill)
// or a newer one reads as no snapshot, even while its writer lives,
// instead of being misread as this format's records.
func TestSnapshotOfAnotherFormat(t *testing.T) {
	dir := t.TempDir()
	old := fmt.Sprintf(`{"written_at":%q,"pid":%d,
		"runs":[{"id":"r1","job":"recs","state":"running","rows_done":10,"rows_total":20,"created_at":"2026-11-01T04:00:00Z","shards":{"pending":1,"running":1,"committed":0,"failed":0}}],
		"shards":{"r1":[{"index":0,"state":"running"}]},
		"backfills":[{"id":"bf","job":"recs","state":"running","dates":[{"value":"2026-11-01","state":"running","run":"r1"}]}]}`,
		time.Now().UTC().Format(time.RFC3339Nano), os.Getpid())
	for name, content := range map[string]string{
		"unversioned (an older precog's views)": old,
		"a newer format":                        fmt.Sprintf(`{"format":%d,"written_at":%q,"pid":%d,"runs":[]}`, SnapshotFormat+1, time.Now().UTC().Format(time.RFC3339Nano), os.Getpid()),
	} {
		if err := os.WriteFile(filepath.Join(dir, SnapshotFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if s, ok := ReadSnapshot(dir); ok {
			t.Errorf("ReadSnapshot of %s: ok, %+v; want no snapshot", name, s)
		}
	}
}

// TestSnapshotFollowsWrites: once KeepSnapshots runs, every write to the
// ledger's file from this process kicks it, whatever Ledger value it went
// through: the snapshot shows a run created through another Ledger of the
// same file without waiting for its period (an hour here) or a Kick.
func TestSnapshotFollowsWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	keep := l.keepSnapshots(ctx, slog.Default(), time.Hour)
	defer keep.Stop()
	other, err := OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.CreateRun(ctx, jobs.Run{ID: "r1", Job: "recs", ParamsKey: "a", CreatedAt: time.Now().UTC()}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s, ok := ReadSnapshot(dir); ok && len(s.Runs) == 1 && s.Runs[0].ID == "r1" {
			break
		}
		if time.Now().After(deadline) {
			s, ok := ReadSnapshot(dir)
			t.Fatalf("snapshot after a write through another Ledger: %v %+v, want run r1", ok, s.Runs)
		}
	}
	// Stopped, it is no longer kicked: the last snapshot stays.
	keep.Stop()
	if err := other.CreateRun(ctx, jobs.Run{ID: "r2", Job: "recs", ParamsKey: "b", CreatedAt: time.Now().UTC()}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	if s, _ := ReadSnapshot(dir); len(s.Runs) != 1 {
		t.Fatalf("snapshot after Stop: %+v, want r1 only", s.Runs)
	}
}
