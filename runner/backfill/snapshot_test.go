package backfill

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestSnapshotViews: what the embedded ledger's snapshot holds becomes the
// views precog runs and status print from it while the ledger is busy:
// each run with its backfill, newest first, each backfill with its dates'
// states; RunsOf filters them as runs --backfill does.
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

	s, ok := ReadSnapshot(dir)
	if !ok {
		t.Fatal("no snapshot of this (live) process")
	}
	all, err := s.RunsOf("", "", 0)
	if err != nil || len(all) != 3 || all[0].ID != "d2024-11-02" || all[2].ID != "solo" {
		t.Fatalf("runs of the snapshot = %+v, %v; want 3, newest first", all, err)
	}
	ofBF, err := s.RunsOf("", "bf", 0)
	if err != nil || len(ofBF) != 2 || ofBF[0].Backfill != "bf" {
		t.Fatalf("runs --backfill bf of the snapshot = %+v, %v; want its 2 runs", ofBF, err)
	}
	if _, err := s.RunsOf("", "nope", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("runs --backfill of a backfill not in the snapshot: %v, want ErrNotFound", err)
	}
	bv, ok := s.Backfill("bf")
	if !ok || len(bv.Dates) != 2 || bv.Dates[0].State != "failed" || bv.Dates[0].Error != "boom" {
		t.Fatalf("backfill bf of the snapshot = %v %+v; want its first date failed with boom", ok, bv)
	}
	if r, ok := s.Run("solo"); !ok || r.Backfill != "" {
		t.Fatalf("run solo of the snapshot = %v %+v", ok, r)
	}
}
