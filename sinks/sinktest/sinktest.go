// Package sinktest is the conformance suite of the sinks protocol
// (sinks.Sink): the Parquet, Redis and Postgres sinks all pass it, so that a
// retried shard, a re-run or a crash looks the same to readers of any sink.
//
// A sink's test supplies a Harness: how to make a fresh isolated sink and
// how a reader sees the currently published data. Data helpers (NewRun,
// Batch, Want, Canon, RowsFromRecord) build and compare records.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Snapshot is what a reader sees at one moment.
type Snapshot struct {
	// Version is the published run version readers resolve ("" when none).
	Version string
	// Rows are the published records by key (KeyOf), values in Canon form.
	Rows map[string]Row
	// Records counts records as read, duplicates included, so that a
	// duplicated key is visible even though Rows holds it once.
	Records int
}

// Harness adapts one sink implementation to the suite.
type Harness struct {
	// New returns a fresh sink writing into a namespace, schema or
	// directory no other test uses. Every run of one test goes through the
	// same sink, so runs replace each other. The suite closes it.
	New func(t *testing.T) sinks.Sink
	// Read returns what a reader of s sees now for runs like run (same job,
	// params and schema): the current published version and all its records.
	// It must return one consistent snapshot, or an error; the suite calls
	// it from several goroutines while runs are written and published.
	Read func(ctx context.Context, s sinks.Sink, run sinks.RunInfo) (Snapshot, error)
	// LoseShard deletes a committed shard of an unpublished run behind the
	// sink's back, as a store restart, an eviction or an operator would
	// (Stage must then report it in a *sinks.MissingError).
	LoseShard func(ctx context.Context, s sinks.Sink, run sinks.RunInfo, index int) error
}

// Exercise runs the suite against h.
func Exercise(t *testing.T, h Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness, s sinks.Sink)
	}{
		{"PublishIntKeys", func(t *testing.T, h Harness, s sinks.Sink) { testPublish(t, h, s, false) }},
		{"PublishStringKeys", func(t *testing.T, h Harness, s sinks.Sink) { testPublish(t, h, s, true) }},
		{"RetriedShards", testRetriedShards},
		{"ConcurrentShards", testConcurrentShards},
		{"ReaderSeesOneVersion", testReaderSeesOneVersion},
		{"AbortKeepsPublished", testAbortKeepsPublished},
		{"AbortUnpublished", testAbortUnpublished},
		{"PublishIdempotent", testPublishIdempotent},
		{"PublishNeverMovesBack", testPublishNeverMovesBack},
		{"PublishSameSecondEitherOrder", testPublishSameSecond},
		{"PublishOrderIsCreationNotText", testPublishOrderNotText},
		{"RetainedInPublishOrderWithinOneSecond", testRetainedInPublishOrder},
		{"EmptyRun", testEmptyRun},
		{"Rollback", testRollback},
		{"StageFindsLostShard", testStageFindsLostShard},
		{"StageChecksRowCounts", testStageChecksRowCounts},
		{"StagePublishesNothing", testStagePublishesNothing},
		{"LockOneWriter", testLockOneWriter},
		{"Inventory", testInventory},
		{"BatchReferences", testBatchReferences},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := h.New(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			c.fn(t, h, s)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// writeShard writes rows [from, to) of run as shard index in batches of
// at most 64 rows and commits.
func writeShard(t *testing.T, s sinks.Sink, run sinks.RunInfo, index, from, to int) {
	t.Helper()
	if err := tryWriteShard(ctxT(t), s, run, shardRows{index: index, from: from, to: to, commit: true}); err != nil {
		t.Fatal(err)
	}
}

// shardRows is what tryWriteShard writes: rows [from, to) of shard index
// (extra shifts their values, for a rewrite that must replace the first),
// committed or left open.
type shardRows struct {
	index, from, to, extra int
	commit                 bool
}

func tryWriteShard(ctx context.Context, s sinks.Sink, run sinks.RunInfo, r shardRows) error {
	index, from, to, extra := r.index, r.from, r.to, r.extra
	w, err := s.Shard(ctx, run, index)
	if err != nil {
		return fmt.Errorf("%s: Shard(%s, %d): %w", s.Name(), run.Version, index, err)
	}
	for lo := from; lo < to; lo += 64 {
		hi := min(lo+64, to)
		b := batch(run, lo, hi, extra)
		err := w.Write(ctx, b)
		b.Release()
		if err != nil {
			return fmt.Errorf("%s: shard %d Write rows [%d,%d): %w", s.Name(), index, lo, hi, err)
		}
	}
	if !r.commit {
		return nil
	}
	if err := w.Commit(ctx); err != nil {
		return fmt.Errorf("%s: shard %d Commit: %w", s.Name(), index, err)
	}
	ledgerOf(s).commit(run, index, int64(to-from))
	return nil
}

func prepare(t *testing.T, s sinks.Sink, run sinks.RunInfo) {
	t.Helper()
	if err := s.Prepare(ctxT(t), run); err != nil {
		t.Fatalf("%s: Prepare(%s): %v", s.Name(), run.Version, err)
	}
}

// publish stages run with the shards the suite committed (as a runner does
// with what its ledger recorded), then publishes it.
func publish(t *testing.T, s sinks.Sink, run sinks.RunInfo) {
	t.Helper()
	if err := s.Stage(ctxT(t), run, ledgerOf(s).committed(run)); err != nil {
		t.Fatalf("%s: Stage(%s): %v", s.Name(), run.Version, err)
	}
	if err := s.Publish(ctxT(t), run); err != nil {
		t.Fatalf("%s: Publish(%s): %v", s.Name(), run.Version, err)
	}
}

// runOf writes and publishes run with the given shard boundaries.
func runOf(t *testing.T, s sinks.Sink, run sinks.RunInfo, bounds ...int) {
	t.Helper()
	prepare(t, s, run)
	for i := 0; i+1 < len(bounds); i++ {
		writeShard(t, s, run, i, bounds[i], bounds[i+1])
	}
	publish(t, s, run)
}

func read(t *testing.T, h Harness, s sinks.Sink, run sinks.RunInfo) Snapshot {
	t.Helper()
	snap, err := h.Read(ctxT(t), s, run)
	if err != nil {
		t.Fatalf("%s: Read: %v", s.Name(), err)
	}
	return snap
}

// expect checks that readers see exactly want as version.
func expect(t *testing.T, h Harness, s sinks.Sink, run sinks.RunInfo, version string, want map[string]Row) {
	t.Helper()
	snap := read(t, h, s, run)
	if err := check(snap, version, want); err != nil {
		t.Fatalf("%s: %v", s.Name(), err)
	}
}

func check(snap Snapshot, version string, want map[string]Row) error {
	if snap.Version != version {
		return fmt.Errorf("reader sees version %q, want %q", snap.Version, version)
	}
	if snap.Records != len(snap.Rows) {
		return fmt.Errorf("reader sees %d records for %d keys: duplicates", snap.Records, len(snap.Rows))
	}
	if d := diffRows(snap.Rows, want); d != "" {
		return fmt.Errorf("version %q: %s", version, d)
	}
	return nil
}

func params() map[string]string { return map[string]string{"date": "2024-11-01"} }

func testPublish(t *testing.T, h Harness, s sinks.Sink, stringKey bool) {
	run := NewRun("v1", stringKey, params())
	prepare(t, s, run)
	prepare(t, s, run) // idempotent
	writeShard(t, s, run, 0, 0, 100)
	writeShard(t, s, run, 1, 100, 250)
	writeShard(t, s, run, 2, 250, 260)
	expect(t, h, s, run, "", nil) // nothing visible before Publish
	publish(t, s, run)
	expect(t, h, s, run, "v1", Want(run, 0, 260))
}

// testRetriedShards: an aborted attempt, an abandoned attempt and a shard
// committed twice leave exactly the committed data.
func testRetriedShards(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run := NewRun("v1", false, params())
	prepare(t, s, run)

	// Shard 0: attempt 1 writes half (with different values) and aborts.
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatalf("Shard: %v", err)
	}
	b := batch(run, 0, 50, 7)
	if err := w.Write(ctx, b); err != nil {
		t.Fatalf("Write: %v", err)
	}
	b.Release()
	if err := w.Abort(ctx); err != nil {
		t.Fatalf("attempt Abort: %v", err)
	}
	writeShard(t, s, run, 0, 0, 100)

	// Shard 1: attempt 1 writes half and is abandoned (its worker died).
	if err := tryWriteShard(ctx, s, run, shardRows{index: 1, from: 100, to: 150, extra: 9}); err != nil {
		t.Fatal(err)
	}
	writeShard(t, s, run, 1, 100, 200)

	// Shard 2: committed twice (the lease was lost after the commit; another
	// worker redid it).
	writeShard(t, s, run, 2, 200, 300)
	writeShard(t, s, run, 2, 200, 300)

	// Shard 3: two committed attempts, the second one wins.
	if err := tryWriteShard(ctx, s, run, shardRows{index: 3, from: 300, to: 350, extra: 3, commit: true}); err != nil {
		t.Fatal(err)
	}
	writeShard(t, s, run, 3, 300, 350)

	publish(t, s, run)
	expect(t, h, s, run, "v1", Want(run, 0, 350))
}

func testConcurrentShards(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run := NewRun("v1", true, params())
	prepare(t, s, run)
	const shards, per = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, shards)
	for i := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tryWriteShard(ctx, s, run, shardRows{index: i, from: i * per, to: (i + 1) * per, commit: true})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	publish(t, s, run)
	expect(t, h, s, run, "v1", Want(run, 0, shards*per))
}

// testReaderSeesOneVersion: readers polling while a second run is written
// and published see the first run complete, then the second complete, never
// a mix, a partial version or a step back.
func testReaderSeesOneVersion(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run1 := NewRun("v1", false, params())
	runOf(t, s, run1, 0, 150, 300)
	want1 := Want(run1, 0, 300)
	expect(t, h, s, run1, "v1", want1)

	run2 := NewRun("v2", false, params())
	want2 := Want(run2, 100, 500) // a different key set: old keys must vanish
	var (
		published atomic.Bool // set once Publish(run2) returned
		stop      atomic.Bool
		reads     atomic.Int64
		sawV2     atomic.Int64
		wg        sync.WaitGroup
	)
	const readers = 3
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seenNew := false
			for !stop.Load() {
				after := published.Load()
				snap, err := h.Read(ctx, s, run1)
				if err != nil {
					t.Errorf("reader %d: Read: %v", r, err)
					return
				}
				reads.Add(1)
				switch snap.Version {
				case "v1":
					if seenNew {
						t.Errorf("reader %d: saw v1 again after v2", r)
						return
					}
					if after {
						t.Errorf("reader %d: saw v1 after Publish(v2) returned", r)
						return
					}
					if err := check(snap, "v1", want1); err != nil {
						t.Errorf("reader %d: %v", r, err)
						return
					}
				case "v2":
					seenNew = true
					sawV2.Add(1)
					if err := check(snap, "v2", want2); err != nil {
						t.Errorf("reader %d: %v", r, err)
						return
					}
				default:
					t.Errorf("reader %d: saw version %q (want v1 or v2): published data disappeared", r, snap.Version)
					return
				}
			}
		}()
	}
	prepare(t, s, run2)
	writeShard(t, s, run2, 0, 100, 300)
	time.Sleep(20 * time.Millisecond)
	writeShard(t, s, run2, 1, 300, 450)
	writeShard(t, s, run2, 2, 450, 500)
	time.Sleep(20 * time.Millisecond)
	if err := s.Stage(ctx, run2, ledgerOf(s).committed(run2)); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("Stage(v2): %v", err)
	}
	if err := s.Publish(ctx, run2); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("Publish(v2): %v", err)
	}
	published.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for sawV2.Load() < readers && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if reads.Load() < readers*2 {
		t.Errorf("only %d reads happened; the test proves little", reads.Load())
	}
	expect(t, h, s, run2, "v2", want2)
}

func testAbortKeepsPublished(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run1 := NewRun("v1", false, params())
	runOf(t, s, run1, 0, 100, 200)

	run2 := NewRun("v2", false, params())
	prepare(t, s, run2)
	writeShard(t, s, run2, 0, 0, 300)
	if err := tryWriteShard(ctx, s, run2, shardRows{index: 1, from: 300, to: 350}); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, run2); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := s.Abort(ctx, run2); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	expect(t, h, s, run1, "v1", Want(run1, 0, 200))

	// The sink still works after an abort: a third run publishes.
	run3 := NewRun("v3", false, params())
	runOf(t, s, run3, 0, 10)
	expect(t, h, s, run3, "v3", Want(run3, 0, 10))
}

func testAbortUnpublished(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run := NewRun("v1", false, params())
	prepare(t, s, run)
	writeShard(t, s, run, 0, 0, 100)
	if err := s.Abort(ctx, run); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	expect(t, h, s, run, "", nil)
	// Aborting a run that never wrote anything is fine too.
	if err := s.Abort(ctx, NewRun("v9", false, params())); err != nil {
		t.Fatalf("Abort of an unknown run: %v", err)
	}
}

func testPublishIdempotent(t *testing.T, h Harness, s sinks.Sink) {
	run := NewRun("v1", false, params())
	runOf(t, s, run, 0, 100, 120)
	publish(t, s, run)
	expect(t, h, s, run, "v1", Want(run, 0, 120))

	// A retried publish of a newer run after the first attempt succeeded
	// (the process died before recording it) must not undo anything.
	run2 := NewRun("v2", false, params())
	runOf(t, s, run2, 0, 30)
	publish(t, s, run2)
	publish(t, s, run2)
	expect(t, h, s, run2, "v2", Want(run2, 0, 30))
}

// testPublishNeverMovesBack: a run staged before a later one published
// (an old failed run retried, a publisher that froze and resumed) is
// refused at Publish with a *sinks.SupersededError, and readers stay on
// the later version; a version published before still republishes as a
// no-op, even after a rollback moved readers behind a later one.
func testPublishNeverMovesBack(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	old := NewRun("v1", false, params())
	prepare(t, s, old)
	writeShard(t, s, old, 0, 0, 40)
	if err := s.Stage(ctx, old, ledgerOf(s).committed(old)); err != nil {
		t.Fatalf("Stage(v1): %v", err)
	}
	later := NewRun("v2", false, params())
	runOf(t, s, later, 0, 60)
	err := s.Publish(ctx, old)
	var se *sinks.SupersededError
	if !errors.As(err, &se) || se.Later != "v2" || se.Version != "v1" {
		t.Fatalf("%s: Publish(v1) after v2 published = %v, want a SupersededError naming v2", s.Name(), err)
	}
	expect(t, h, s, later, "v2", Want(later, 0, 60))

	rb, ok := s.(sinks.Rollbacker)
	if !ok {
		return
	}
	v3 := NewRun("v3", false, params())
	runOf(t, s, v3, 0, 30)
	if err := rb.Rollback(ctx, v3, "v2"); err != nil {
		t.Fatalf("Rollback(v2): %v", err)
	}
	// A retried publish of v3 (published before) changes nothing: readers
	// stay where the rollback put them.
	if err := s.Publish(ctx, v3); err != nil {
		t.Fatalf("%s: republish of v3 after a rollback: %v", s.Name(), err)
	}
	expect(t, h, s, later, "v2", Want(later, 0, 60))
}

// testPublishSameSecond: versions are ordered by their creation time
// (sinks.CheckPublishOrder); two runs of one time stamp (here versions an
// older precog made, to the second) publish in either order, whatever
// their random suffixes.
func testPublishSameSecond(t *testing.T, h Harness, s sinks.Sink) {
	first := NewRun("20261126t025547-ffff", false, params())
	runOf(t, s, first, 0, 20)
	second := NewRun("20261126t025547-0000", false, params())
	runOf(t, s, second, 0, 30)
	expect(t, h, s, second, "20261126t025547-0000", Want(second, 0, 30))
}

// testPublishOrderNotText: the newest published version is the one
// created last (jobs.Version's order: the time part before the first
// "-"), not the greatest text. After v-1 and then v+9 (created later:
// its time part "v+9" sorts after "v") are published, v+5-a (created
// between them) is superseded by v+9 and readers stay there. As text
// "v-1" sorts after "v+9" ('-' after '+'), and the sinks that took the
// greatest text as the latest (Postgres, a Parquet directory) let v+5-a
// move readers back.
func testPublishOrderNotText(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	first := NewRun("v-1", false, params())
	runOf(t, s, first, 0, 20)
	later := NewRun("v+9", false, params())
	runOf(t, s, later, 0, 30)
	mid := NewRun("v+5-a", false, params())
	prepare(t, s, mid)
	writeShard(t, s, mid, 0, 0, 40)
	if err := s.Stage(ctx, mid, ledgerOf(s).committed(mid)); err != nil {
		t.Fatalf("Stage(v+5-a): %v", err)
	}
	err := s.Publish(ctx, mid)
	var se *sinks.SupersededError
	if !errors.As(err, &se) || se.Later != "v+9" {
		t.Fatalf("%s: Publish(v+5-a) after v-1 and v+9 published = %v, want a SupersededError naming v+9", s.Name(), err)
	}
	expect(t, h, s, later, "v+9", Want(later, 0, 30))
}

// testRetainedInPublishOrder: three runs created (jobs.NewVersion) and
// published within one second, whose random suffixes sort the other way
// round, are listed newest first in publish order; retention (retain 2
// by default) keeps the last two, and a rollback to the version before
// the current one finds the second run. Versions made to the second were
// ordered by their random suffix (issue 31): retention dropped the
// second run and kept the first.
func testRetainedInPublishOrder(t *testing.T, h Harness, s sinks.Sink) {
	rb, ok := s.(sinks.Rollbacker)
	if !ok {
		t.Skipf("%s does not implement sinks.Rollbacker", s.Name())
	}
	ctx := ctxT(t)
	vs := versionsInOneSecond(t, 3)
	runs := make([]sinks.RunInfo, len(vs))
	for i, v := range vs {
		runs[i] = NewRun(v, false, params())
		runOf(t, s, runs[i], 0, 10*(i+1))
	}
	got, err := rb.Versions(ctx, runs[2])
	if err != nil {
		t.Fatalf("Versions: %v", err)
	}
	if len(got) < 2 || got[0] != vs[2] || got[1] != vs[1] || (len(got) > 2 && got[2] != vs[0]) {
		t.Fatalf("%s: Versions = %v, want newest first in publish order %v", s.Name(), got, []string{vs[2], vs[1], vs[0]})
	}
	if err := rb.Rollback(ctx, runs[2], got[1]); err != nil {
		t.Fatalf("Rollback(%s): %v", got[1], err)
	}
	expect(t, h, s, runs[1], vs[1], Want(runs[1], 0, 20))
}

// versionsInOneSecond makes n versions with jobs.NewVersion at times a
// millisecond apart within one second, in creation order, drawn until
// their random suffixes sort the other way round (a bounded number of
// draws: each try succeeds with probability 1/n!).
func versionsInOneSecond(t *testing.T, n int) []string {
	t.Helper()
	at := time.Date(2026, 11, 26, 2, 55, 47, 100_000_000, time.UTC)
	suffix := func(v string) string { return v[strings.LastIndexByte(v, '-')+1:] }
	for range 10_000 {
		vs := make([]string, n)
		for i := range vs {
			vs[i] = jobs.NewVersion(at.Add(time.Duration(i) * time.Millisecond)).String()
		}
		if slices.IsSortedFunc(vs, func(a, b string) int { return strings.Compare(suffix(b), suffix(a)) }) && suffix(vs[0]) != suffix(vs[n-1]) {
			return vs
		}
	}
	t.Fatalf("no %d versions with descending suffixes in 10000 draws", n)
	return nil
}

func testEmptyRun(t *testing.T, h Harness, s sinks.Sink) {
	run1 := NewRun("v1", false, params())
	runOf(t, s, run1, 0, 50)
	// An empty run publishes an empty version: the old rows are gone.
	run2 := NewRun("v2", false, params())
	runOf(t, s, run2)
	expect(t, h, s, run2, "v2", map[string]Row{})
	// A run whose shards hold no rows, likewise.
	run3 := NewRun("v3", false, params())
	runOf(t, s, run3, 0, 0, 0)
	expect(t, h, s, run3, "v3", map[string]Row{})
}

func testRollback(t *testing.T, h Harness, s sinks.Sink) {
	rb, ok := s.(sinks.Rollbacker)
	if !ok {
		t.Skipf("%s does not implement sinks.Rollbacker", s.Name())
	}
	ctx := ctxT(t)
	run1 := NewRun("v1", false, params())
	runOf(t, s, run1, 0, 40)
	run2 := NewRun("v2", false, params())
	runOf(t, s, run2, 0, 60)
	vs, err := rb.Versions(ctx, run2)
	if err != nil {
		t.Fatalf("Versions: %v", err)
	}
	if len(vs) < 2 || vs[0] != "v2" || vs[1] != "v1" {
		t.Fatalf("Versions = %v, want [v2 v1 …]", vs)
	}
	if err := rb.Rollback(ctx, run2, "v1"); err != nil {
		t.Fatalf("Rollback(v1): %v", err)
	}
	expect(t, h, s, run1, "v1", Want(run1, 0, 40))
	if err := rb.Rollback(ctx, run2, "no-such-version"); err == nil {
		t.Fatalf("Rollback to an unknown version succeeded")
	}
	expect(t, h, s, run1, "v1", Want(run1, 0, 40))
}
