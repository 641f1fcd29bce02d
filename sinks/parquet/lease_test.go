package parquet

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// takeWhenFree retries Lock until the holder's lease lapses: bounded in
// count and time, it waits on the lease's own expiry, not on a sleep sized
// to the machine.
func takeWhenFree(t *testing.T, s *Sink, run sinks.RunInfo, h sinks.Holder, within time.Duration) sinks.Lock {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l, err := s.Lock(context.Background(), run, h)
		var le *sinks.LockedError
		switch {
		case err == nil:
			return l
		case !errors.As(err, &le):
			t.Fatalf("Lock: %v", err)
		case time.Now().After(deadline):
			t.Fatalf("the frozen holder's lease did not lapse within %s: %v", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("%s by the stale holder = %v, want an error wrapping ErrFenced", what, err)
	}
}

// TestLeaseTakeoverFencesStaleHolder: a holder that stops renewing (a
// frozen process: its flock is still held) loses the target once its
// lease lapses; another writer takes it over and publishes, and the stale
// holder, awake again, can neither commit, stage, publish nor abort:
// the published directory and the retained versions are exactly what the
// new holder left. With the old flock lock the second Lock never succeeded.
func TestLeaseTakeoverFencesStaleHolder(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "out", "recs")
	stale := newSink(t, jobs.ParquetSinkSpec{Path: target})
	fresh := newSink(t, jobs.ParquetSinkSpec{Path: target})
	const lease = 400 * time.Millisecond

	v1 := sinktest.NewRun("v1", false, nil)
	writeRun(t, fresh, v1, 3)
	if err := fresh.Publish(ctx, v1); err != nil {
		t.Fatal(err)
	}

	b := sinktest.NewRun("v2", false, nil)
	hb := sinks.ThisProcess(b)
	hb.Lease = lease
	lb, err := stale.Lock(ctx, b, hb)
	if err != nil {
		t.Fatal(err)
	}
	writeRun(t, stale, b, 5) // staged, not published
	lb.(*leaseLock).Freeze()
	// A late shard attempt of the stale holder, opened before it froze.
	late, err := stale.Shard(ctx, b, 1)
	if err != nil {
		t.Fatal(err)
	}

	c := sinktest.NewRun("v3", false, nil)
	hc := sinks.ThisProcess(c)
	hc.PID++ // another process
	hc.Lease = lease
	began := time.Now()
	lc := takeWhenFree(t, fresh, c, hc, 20*lease)
	t.Logf("took the target over %s after the holder froze (lease %s)", time.Since(began).Round(time.Millisecond), lease)
	select {
	case <-lb.Lost():
	case <-time.After(10 * lease):
		t.Fatal("the stale holder's lock never reported lost")
	}
	writeRun(t, fresh, c, 7)
	if err := fresh.Publish(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := tree(t, filepath.Dir(target))

	// The stale holder wakes: every step is refused.
	wantFenced(t, "Commit", late.Commit(ctx))
	wantFenced(t, "Stage", stale.Stage(ctx, b, []sinks.CommittedShard{{Index: 0, Rows: 5}}))
	wantFenced(t, "Publish", stale.Publish(ctx, b))
	wantFenced(t, "Abort", stale.Abort(ctx, b))
	if after := tree(t, filepath.Dir(target)); !maps.Equal(after, before) {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("changed or added: %s", k)
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				t.Errorf("removed: %s", k)
			}
		}
		t.Fatal("the stale holder changed the directory")
	}
	expectDir(t, target, c, 7)
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("Release of the lost lease: %v", err)
	}
	// Releasing the lost lease left the new holder's record alone.
	if _, rec, _ := highest(lockDir(target)); rec == nil || rec.Holder.RunID != c.RunID {
		t.Fatalf("lease record after the stale Release: %+v, want the new holder's", rec)
	}
	if vs, err := fresh.Versions(ctx, c); err != nil || !slices.Equal(vs, []string{"v3", "v1"}) {
		t.Fatalf("Versions = %v (%v), want [v3 v1]", vs, err)
	}
}

// TestLeaseSameRunTakesOver: another process of the same run (a cluster
// worker that got the run's publish lease after the first froze) takes
// the target at once; the first is fenced.
func TestLeaseSameRunTakesOver(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	first := newSink(t, jobs.ParquetSinkSpec{Path: target})
	second := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run := sinktest.NewRun("v1", false, nil)
	h1 := sinks.ThisProcess(run)
	l1, err := first.Lock(ctx, run, h1)
	if err != nil {
		t.Fatal(err)
	}
	writeRun(t, first, run, 4)
	h2 := h1
	h2.PID++
	l2, err := second.Lock(ctx, run, h2)
	if err != nil {
		t.Fatalf("Lock by another process of the same run: %v", err)
	}
	if err := second.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	wantFenced(t, "Publish", first.Publish(ctx, run))
	<-l1.Lost()
	expectDir(t, target, run, 4)
	_ = l1.Release(ctx)
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionAndRollback: with retain 2 the target keeps the previous
// published version beside it; rollback swaps it back in exactly, a
// version beyond retention is gone and refused, a retried publish of a
// version rolled back from is left as it is, and a new publish keeps the
// one it replaced and drops the oldest.
func TestRetentionAndRollback(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target, Retain: 2})
	runs := map[string]sinks.RunInfo{}
	rows := map[string]int{"v1": 3, "v2": 5, "v3": 7, "v4": 9}
	publish := func(v string) {
		t.Helper()
		runs[v] = sinktest.NewRun(v, false, nil)
		writeRun(t, s, runs[v], rows[v])
		if err := s.Publish(ctx, runs[v]); err != nil {
			t.Fatalf("Publish(%s): %v", v, err)
		}
	}
	versions := func(want ...string) {
		t.Helper()
		if vs, err := s.Versions(ctx, sinks.RunInfo{Job: testJob}); err != nil || !slices.Equal(vs, want) {
			t.Fatalf("Versions = %v (%v), want %v", vs, err, want)
		}
	}
	publish("v1")
	publish("v2")
	v2files := tree(t, target)
	publish("v3")
	versions("v3", "v2")
	if err := s.Rollback(ctx, sinks.RunInfo{Job: testJob}, "v1"); err == nil {
		t.Fatal("Rollback to v1, beyond retention, succeeded")
	}
	if err := s.Rollback(ctx, sinks.RunInfo{Job: testJob}, "v2"); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, target); !maps.Equal(got, v2files) {
		t.Fatalf("after rollback the target holds %v, want v2's files %v", got, v2files)
	}
	if cur, _ := s.Current(ctx, sinks.RunInfo{Job: testJob}); cur != "v2" {
		t.Fatalf("Current = %s, want v2", cur)
	}
	versions("v3", "v2")
	// A retried publish of v3 does not undo the rollback.
	if err := s.Publish(ctx, runs["v3"]); err != nil {
		t.Fatal(err)
	}
	expectDir(t, target, runs["v2"], 5)
	onlyTarget(t, target)
	publish("v4")
	versions("v4", "v3")
	expectDir(t, filepath.Join(versionsDir(target), "v3"), runs["v3"], 7)
	onlyTarget(t, target)
}

// TestGCRemovesBeyondRetention: versions left beyond retention (the
// retention was lowered since they were kept) are listed as unpublished,
// and Abort, which gc runs for them, removes them and nothing else: the
// current version and a user's file beside them stay.
func TestGCRemovesBeyondRetention(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target, Retain: 3})
	for i, v := range []string{"v1", "v2", "v3"} {
		run := sinktest.NewRun(v, false, nil)
		writeRun(t, s, run, 3+i)
		if err := s.Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	user := filepath.Join(versionsDir(target), "v1", "notes.txt")
	if err := os.WriteFile(user, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	lower := newSink(t, jobs.ParquetSinkSpec{Path: target, Retain: 2})
	info := sinks.RunInfo{Job: testJob}
	if sum := summary(stored(t, lower, info)); sum != "v3:current v1:staging v2:kept" {
		t.Fatalf("Stored with retain 2 = %s, want v3:current v1:staging v2:kept", sum)
	}
	err := lower.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v1"})
	if err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("Abort(v1) = %v, want it to name the user's file it left", err)
	}
	if b, err := os.ReadFile(user); err != nil || string(b) != "mine" {
		t.Fatalf("the user's file: %q %v", b, err)
	}
	if err := lower.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	if vs, _ := lower.Versions(ctx, info); !slices.Equal(vs, []string{"v3", "v2"}) {
		t.Fatalf("Versions after gc = %v, want [v3 v2]: Abort removed a retained version", vs)
	}
	if _, err := os.Stat(filepath.Join(versionsDir(target), "v1", partName(0))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("v1's part file after gc: %v", err)
	}
	expectDir(t, target, sinktest.NewRun("v3", false, nil), 5)
}

// TestLeaseLapseOnFilesystemClock: whether a lease lapsed is read on the
// filesystem's clock (the record's modification time), not from the
// expiry the holder wrote with its own clock: a holder whose clock runs
// behind (its expiry already past) keeps its target while it renews, and
// one whose record went unrenewed for a lease loses it whatever expiry it
// wrote.
func TestLeaseLapseOnFilesystemClock(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	a := newSink(t, jobs.ParquetSinkSpec{Path: target})
	b := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1, run2 := sinktest.NewRun("v1", false, nil), sinktest.NewRun("v2", false, nil)
	h1 := sinks.ThisProcess(run1)
	h1.Lease = time.Minute
	l1, err := a.Lock(ctx, run1, h1)
	if err != nil {
		t.Fatal(err)
	}
	ll := l1.(*leaseLock)
	ll.Freeze()
	h2 := sinks.ThisProcess(run2)
	h2.PID++
	// The holder's clock is behind: the expiry it wrote has passed.
	ll.mu.Lock()
	ll.rec.Expires = time.Now().Add(-time.Hour)
	ll.mu.Unlock()
	if err := ll.writeRaw(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, run2, h2); !errors.As(err, new(*sinks.LockedError)) {
		t.Fatalf("Lock of a renewed lease whose written expiry passed = %v, want a LockedError", err)
	}
	// Unrenewed for longer than its lease on the filesystem's clock.
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(ll.path, old, old); err != nil {
		t.Fatal(err)
	}
	l2, err := b.Lock(ctx, run2, h2)
	if err != nil {
		t.Fatalf("Lock of a lease unrenewed for 2 leases: %v", err)
	}
	wantFenced(t, "Abort", a.Abort(ctx, run1))
	_ = l1.Release(ctx)
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
