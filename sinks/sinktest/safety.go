package sinktest

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/precog-ml/precog/sinks"
)

// shardLedger records what the suite committed per sink and run version,
// standing in for the runner's ledger when the suite calls Stage.
type shardLedger struct {
	mu   sync.Mutex
	rows map[string]map[int]int64 // version -> shard -> rows
}

var ledgers sync.Map // sinks.Sink -> *shardLedger

func ledgerOf(s sinks.Sink) *shardLedger {
	l, _ := ledgers.LoadOrStore(s, &shardLedger{rows: map[string]map[int]int64{}})
	return l.(*shardLedger)
}

func (l *shardLedger) commit(run sinks.RunInfo, index int, rows int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rows[run.Version] == nil {
		l.rows[run.Version] = map[int]int64{}
	}
	l.rows[run.Version][index] = rows
}

func (l *shardLedger) committed(run sinks.RunInfo) []sinks.CommittedShard {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]sinks.CommittedShard, 0, len(l.rows[run.Version]))
	for i, n := range l.rows[run.Version] {
		out = append(out, sinks.CommittedShard{Index: i, Rows: n})
	}
	slices.SortFunc(out, func(a, b sinks.CommittedShard) int { return a.Index - b.Index })
	return out
}

func wantMissing(t *testing.T, s sinks.Sink, err error, shards ...int) {
	t.Helper()
	var me *sinks.MissingError
	if !errors.As(err, &me) {
		t.Fatalf("%s: Stage = %v, want a *sinks.MissingError for shards %v", s.Name(), err, shards)
	}
	got := slices.Clone(me.Shards)
	slices.Sort(got)
	if !slices.Equal(got, shards) {
		t.Fatalf("%s: Stage reports shards %v missing, want %v (%v)", s.Name(), got, shards, err)
	}
}

// testStageFindsLostShard: a committed shard the store lost is reported by
// Stage, nothing is published around it, and once recomputed the run
// publishes whole.
func testStageFindsLostShard(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run := NewRun("v1", false, params())
	prepare(t, s, run)
	writeShard(t, s, run, 0, 0, 100)
	writeShard(t, s, run, 1, 100, 200)
	writeShard(t, s, run, 2, 200, 300)
	if err := h.LoseShard(ctx, s, run, 1); err != nil {
		t.Fatalf("LoseShard: %v", err)
	}
	wantMissing(t, s, s.Stage(ctx, run, ledgerOf(s).committed(run)), 1)
	expect(t, h, s, run, "", nil)
	writeShard(t, s, run, 1, 100, 200) // the runner recomputes it
	publish(t, s, run)
	expect(t, h, s, run, "v1", Want(run, 0, 300))
}

// testStageChecksRowCounts: a shard holding fewer rows than the ledger
// recorded is as good as lost.
func testStageChecksRowCounts(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run := NewRun("v1", false, params())
	prepare(t, s, run)
	writeShard(t, s, run, 0, 0, 100)
	writeShard(t, s, run, 1, 100, 200)
	committed := ledgerOf(s).committed(run)
	committed[0].Rows = 150 // the ledger says shard 0 wrote 150 rows
	wantMissing(t, s, s.Stage(ctx, run, committed), 0)
	// A shard the ledger has committed but the sink never saw is missing too.
	committed = append(ledgerOf(s).committed(run), sinks.CommittedShard{Index: 7, Rows: 5})
	wantMissing(t, s, s.Stage(ctx, run, committed), 7)
	expect(t, h, s, run, "", nil)
}

// testStagePublishesNothing: Stage alone leaves the published version as it
// was, even for a run that stages cleanly, and an aborted staged run never
// becomes visible.
func testStagePublishesNothing(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run1 := NewRun("v1", false, params())
	runOf(t, s, run1, 0, 50)
	run2 := NewRun("v2", false, params())
	prepare(t, s, run2)
	writeShard(t, s, run2, 0, 0, 80)
	if err := s.Stage(ctx, run2, ledgerOf(s).committed(run2)); err != nil {
		t.Fatalf("Stage(v2): %v", err)
	}
	expect(t, h, s, run1, "v1", Want(run1, 0, 50))
	if err := s.Abort(ctx, run2); err != nil {
		t.Fatalf("Abort(v2): %v", err)
	}
	expect(t, h, s, run1, "v1", Want(run1, 0, 50))
}

// testLockOneWriter: a second writer of the same target is refused with an
// error naming the first; after Release it gets the lock.
func testLockOneWriter(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run1 := NewRun("v1", false, params())
	run2 := NewRun("v2", false, params())
	h1 := sinks.ThisProcess(run1)
	h2 := sinks.ThisProcess(run2)
	h2.PID++ // another process
	l1, err := s.Lock(ctx, run1, h1)
	if err != nil {
		t.Fatalf("%s: Lock(v1): %v", s.Name(), err)
	}
	_, err = s.Lock(ctx, run2, h2)
	var le *sinks.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("%s: second Lock = %v, want a *sinks.LockedError", s.Name(), err)
	}
	if le.Holder.RunID != run1.RunID || le.Holder.PID != h1.PID || le.Holder.Host != h1.Host {
		t.Fatalf("%s: LockedError names %+v, want the first holder %+v", s.Name(), le.Holder, h1)
	}
	select {
	case <-l1.Lost():
		t.Fatalf("%s: the held lock reports lost", s.Name())
	default:
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("%s: Release: %v", s.Name(), err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("%s: second Release: %v", s.Name(), err)
	}
	l2, err := s.Lock(ctx, run2, h2)
	if err != nil {
		t.Fatalf("%s: Lock after Release: %v", s.Name(), err)
	}
	_ = l2.Release(ctx)
}
