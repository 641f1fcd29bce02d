package parquet

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// TestStageDropsUncommittedParts: a part file of a shard the ledger did not
// record (an abandoned attempt's commit) is not published.
func TestStageDropsUncommittedParts(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run := sinktest.NewRun("v1", false, nil)
	writeShard0(t, s, run, 4)
	commitShard(t, s, run, 1, 4)
	commitShard(t, s, run, 2, 4)
	if err := s.Stage(ctx, run, []sinks.CommittedShard{{Index: 0, Rows: 4}, {Index: 2, Rows: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	names, err := readNames(target)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{MarkerFile, SuccessFile, partName(0), partName(2)}; !slices.Equal(names, want) {
		t.Fatalf("published %v, want %v", names, want)
	}
}

// TestStageReportsEveryLostShard: missing, short and unreadable shards are
// all listed in one *sinks.MissingError, and nothing is staged.
func TestStageReportsEveryLostShard(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "recs")})
	run := sinktest.NewRun("v1", false, nil)
	writeShard0(t, s, run, 5)
	for i := 1; i < 4; i++ {
		commitShard(t, s, run, i, 5)
	}
	d, _ := s.dirs(run)
	if err := os.Remove(filepath.Join(d.staging, partName(1))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.staging, partName(3)), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	committed := []sinks.CommittedShard{{Index: 0, Rows: 5}, {Index: 1, Rows: 5}, {Index: 2, Rows: 9}, {Index: 3, Rows: 5}}
	err := s.Stage(ctx, run, committed)
	me, ok := err.(*sinks.MissingError)
	if !ok {
		t.Fatalf("Stage = %v, want a *sinks.MissingError", err)
	}
	if !slices.Equal(me.Shards, []int{1, 2, 3}) || me.Sink != "parquet" {
		t.Fatalf("MissingError = %+v, want parquet shards [1 2 3]", me)
	}
	for _, want := range []string{"part-00001.parquet is missing", "part-00002.parquet has 5 of 9 rows", "part-00003.parquet is unreadable"} {
		if !strings.Contains(me.Reason, want) {
			t.Errorf("Reason %q lacks %q", me.Reason, want)
		}
	}
	if _, err := ReadMarker(d.staging); err == nil {
		t.Fatal("a run with lost shards was marked staged")
	}
	if err := s.Publish(ctx, run); err == nil || !strings.Contains(err.Error(), "Stage") {
		t.Fatalf("Publish of an unstaged run = %v, want an error saying Stage must succeed first", err)
	}
}

// TestStageKeepsForeignFiles: a file precog did not write in staging fails
// the stage and stays.
func TestStageKeepsForeignFiles(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "recs")})
	run := sinktest.NewRun("v1", false, nil)
	writeShard0(t, s, run, 5)
	d, _ := s.dirs(run)
	stray := filepath.Join(d.staging, "stray.csv")
	if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Stage(ctx, run, []sinks.CommittedShard{{Index: 0, Rows: 5}})
	if err == nil || !strings.Contains(err.Error(), "stray.csv") {
		t.Fatalf("Stage = %v, want an error naming stray.csv", err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("stray.csv: %v", err)
	}
}
