package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

func storedSummary(t *testing.T, s *Sink) (string, []sinks.StoredVersion) {
	t.Helper()
	got, err := s.Stored(context.Background(), sinks.RunInfo{Job: "test"})
	if err != nil {
		t.Fatalf("Stored: %v", err)
	}
	var parts []string
	for _, v := range got {
		kind := "orphan"
		switch {
		case v.Current:
			kind = "current"
		case v.Published:
			kind = "retained"
		}
		parts = append(parts, v.Version+":"+kind)
	}
	return strings.Join(parts, " "), got
}

// TestStoredKilledRun: the current and retained versions are listed as
// published; a killed run (prepared, a shard committed, never published
// nor aborted) and a run killed right after Prepare as not, and Abort with
// only the version deletes them. Keys of another application, even one
// named like a marker, are neither listed nor deleted.
func TestStoredKilledRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Retain = 2 })
	ns := rs.Prefix
	for _, v := range []string{"v1", "v2", "v3"} {
		run := testRun(v)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := writeShard(ctx, s, run, 0, 0, 20, 10, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitCleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	killed := testRun("v4")
	if err := s.Prepare(ctx, killed); err != nil {
		t.Fatal(err)
	}
	if err := writeShard(ctx, s, killed, 1, 0, 30, 10, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, testRun("v5")); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, ns+":shards:mine", "a user's string", 0)
	c.HSet(ctx, ns+":shards:theirs", "0", "a hash without precog's format field")
	c.Set(ctx, ns+":keys:v9", "a string named like a key record", 0)
	c.Set(ctx, "other:shards:v9", "x", 0)

	sum, got := storedSummary(t, s)
	if sum != "v2:retained v3:current v4:orphan v5:orphan" {
		t.Fatalf("Stored = %q, want v2:retained v3:current v4:orphan v5:orphan", sum)
	}
	if w := got[2].What; !strings.Contains(w, "30 records in 1 committed shards") || !strings.Contains(w, ns+":v4:*") {
		t.Errorf("killed run described as %q", w)
	}
	for _, v := range []string{"v4", "v5"} {
		if err := s.Abort(ctx, sinks.RunInfo{Job: "test", Version: v}); err != nil {
			t.Fatalf("Abort(%s) without schema or run id: %v", v, err)
		}
	}
	if sum, _ := storedSummary(t, s); sum != "v2:retained v3:current" {
		t.Fatalf("after Abort Stored = %q, want v2:retained v3:current", sum)
	}
	if n := len(readAll(t, c, ns+":v4:*")); n != 0 {
		t.Fatalf("%d keys of the killed run remain", n)
	}
	checkVersion(t, c, ns, testRun("v2"), 20, 1)
	checkVersion(t, c, ns, testRun("v3"), 20, 1)
	for _, k := range []string{ns + ":shards:mine", ns + ":shards:theirs", ns + ":keys:v9", "other:shards:v9"} {
		if c.Exists(ctx, k).Val() != 1 {
			t.Errorf("another application's key %s was deleted", k)
		}
	}
}

// TestStoredInPlace: in_place lists only the markers of unpublished runs.
func TestStoredInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Publish = jobs.RedisPublishInPlace })
	pub, killed := testRun("v1"), testRun("v2")
	for _, run := range []sinks.RunInfo{pub, killed} {
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := writeShard(ctx, s, run, 0, 0, 10, 10, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Publish(ctx, pub); err != nil {
		t.Fatal(err)
	}
	sum, got := storedSummary(t, s)
	if sum != "v2:orphan" || !strings.Contains(got[0].What, "in_place records") {
		t.Fatalf("Stored = %q %v, want v2:orphan, its markers", sum, got)
	}
	if err := s.Abort(ctx, sinks.RunInfo{Job: "test", Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	if sum, _ := storedSummary(t, s); sum != "" {
		t.Fatalf("after Abort Stored = %q, want nothing", sum)
	}
}
