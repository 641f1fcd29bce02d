package parquet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// stored calls Stored and indexes the result by version and kind of place.
func stored(t *testing.T, s *Sink, run sinks.RunInfo) []sinks.StoredVersion {
	t.Helper()
	got, err := s.Stored(context.Background(), run)
	if err != nil {
		t.Fatalf("Stored: %v", err)
	}
	return got
}

func summary(vs []sinks.StoredVersion) string {
	var parts []string
	for _, v := range vs {
		kind := "staging"
		switch {
		case v.Current:
			kind = "current"
		case v.Published:
			kind = "kept"
		}
		if strings.Contains(v.What, "moved aside") {
			kind += "-old"
		}
		parts = append(parts, v.Version+":"+kind)
	}
	return strings.Join(parts, " ")
}

// TestStoredKilledRun: a run killed after committing a shard (no Stage,
// no Publish, no Abort) leaves its staging directory, which Stored lists
// as unpublished beside the published run; Abort with only the version
// removes it. A user's files and a symlink by a precog name are neither
// listed nor touched.
func TestStoredKilledRun(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	target := filepath.Join(root, "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	for _, v := range []string{"v1", "v2"} {
		run := sinktest.NewRun(v, false, nil)
		writeRun(t, s, run, 5)
		if err := s.Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	killed := sinktest.NewRun("v3", false, nil)
	writeShard0(t, s, killed, 4)

	// The user's things beside the target, one of them named like staging.
	foreignDir := filepath.Join(root, "elsewhere")
	if err := os.MkdirAll(foreignDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "notes.txt"), filepath.Join(foreignDir, partName(0))} {
		if err := os.WriteFile(p, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(foreignDir, filepath.Join(root, ".recs.precog-sym")); err != nil {
		t.Fatal(err)
	}

	info := sinks.RunInfo{Job: testJob}
	got := stored(t, s, info)
	if sum := summary(got); sum != "v2:current v3:staging v1:kept" {
		t.Fatalf("Stored = %s, want v2:current v3:staging v1:kept (retained)", sum)
	}
	if !strings.Contains(got[1].What, "1 files") {
		t.Errorf("staging entry %q does not count its committed part file", got[1].What)
	}

	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v3"}); err != nil {
		t.Fatalf("Abort(v3) without schema or run id: %v", err)
	}
	if sum := summary(stored(t, s, info)); sum != "v2:current v1:kept" {
		t.Fatalf("after Abort(v3) Stored = %s, want v2:current v1:kept", sum)
	}
	expectDir(t, target, sinktest.NewRun("v2", false, nil), 5)
	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "sym"}); err == nil {
		t.Errorf("Abort through a symlink by a staging name succeeded; want it refused")
	}
	for _, p := range []string{filepath.Join(root, "notes.txt"), filepath.Join(foreignDir, partName(0))} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("user's file %s: %v", p, err)
		}
	}
}

// TestStoredMovedAside: without RENAME_EXCHANGE a publish moves the
// previous run aside. Left behind after the target was replaced, it is an
// orphan Abort removes; while the target is missing it is the only copy
// and is listed as published.
func TestStoredMovedAside(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1, run2 := sinktest.NewRun("v1", false, nil), sinktest.NewRun("v2", false, nil)
	writeRun(t, s, run1, 5)
	if err := s.Publish(ctx, run1); err != nil {
		t.Fatal(err)
	}
	writeRun(t, s, run2, 7)
	d, err := s.dirs(run2)
	if err != nil {
		t.Fatal(err)
	}
	// Killed between the two renames: the target is missing.
	if err := os.Rename(d.target, d.old); err != nil {
		t.Fatal(err)
	}
	info := sinks.RunInfo{Job: testJob}
	if sum := summary(stored(t, s, info)); sum != "v2:kept-old v2:staging" {
		t.Fatalf("mid-publish Stored = %s, want v2:kept-old v2:staging", sum)
	}
	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.old); err != nil {
		t.Fatalf("Abort removed the only copy of the previous run: %v", err)
	}
	// Killed after the second rename: the old run is garbage.
	writeRun(t, s, run2, 7)
	if err := os.Rename(d.staging, d.target); err != nil {
		t.Fatal(err)
	}
	if sum := summary(stored(t, s, info)); sum != "v2:current v2:staging-old" {
		t.Fatalf("after publish Stored = %s, want v2:current v2:staging-old", sum)
	}
	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	if sum := summary(stored(t, s, info)); sum != "v2:current" {
		t.Fatalf("after Abort Stored = %s, want v2:current", sum)
	}
	expectDir(t, target, run2, 7)
}

// TestStoredOtherJob: a job never lists another job's published directory.
func TestStoredOtherJob(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run := sinktest.NewRun("v1", false, nil)
	writeRun(t, s, run, 3)
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	other, err := New("other-job", jobs.ParquetSinkSpec{Path: target})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(t, other, sinks.RunInfo{Job: "other-job"}); len(got) != 0 {
		t.Fatalf("other job's Stored = %s, want nothing", summary(got))
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 1_234_567: "1.2 MB", 5_000_000_000: "5.0 GB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
