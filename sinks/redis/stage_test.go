package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

func committedShards(rows ...int64) []sinks.CommittedShard {
	out := make([]sinks.CommittedShard, len(rows))
	for i, n := range rows {
		out[i] = sinks.CommittedShard{Index: i, Rows: n}
	}
	return out
}

func wantMissing(t *testing.T, err error, reason string, shards ...int) {
	t.Helper()
	var me *sinks.MissingError
	if !errors.As(err, &me) {
		t.Fatalf("Stage = %v, want a *sinks.MissingError for shards %v", err, shards)
	}
	if !slices.Equal(me.Shards, shards) {
		t.Fatalf("Stage reports shards %v missing, want %v (%v)", me.Shards, shards, err)
	}
	if !strings.Contains(me.Reason, reason) {
		t.Fatalf("Stage reason %q does not say %q", me.Reason, reason)
	}
}

// TestStageAfterRestartWithoutPersistence: shards committed, the server
// restarted without persistence, a shard written across the restart (its
// marker lands on the new server, its first records were lost): Stage
// reports every one of them, and once rewritten the run publishes whole.
func TestStageAfterRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.NewRedis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 100 })
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := writeShard(ctx, s, run, i, i*1000, (i+1)*1000, 250, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Shard 3 starts (and writes half its rows) before the restart and
	// commits after it: its marker exists, but half its records are gone.
	w, err := s.Shard(ctx, run, 3)
	if err != nil {
		t.Fatal(err)
	}
	rec := testBatch(run, 3000, 3500, 1)
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	waitAcked(t, w.(*shardWriter), 500)
	rs.Stop()
	rs.Start()
	rec = testBatch(run, 3500, 4000, 1)
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Shard 4 is written wholly after the restart: it is intact.
	if err := writeShard(ctx, s, run, 4, 4000, 5000, 250, 1); err != nil {
		t.Fatal(err)
	}
	committed := committedShards(1000, 1000, 1000, 1000, 1000)
	wantMissing(t, s.Stage(ctx, run, committed), "marker missing", 0, 1, 2, 3)
	var me *sinks.MissingError
	errors.As(s.Stage(ctx, run, committed), &me)
	if !strings.Contains(me.Reason, "restarted") || !strings.Contains(me.Reason, "(shards [3])") {
		t.Fatalf("reason %q does not name the restart for shard 3", me.Reason)
	}
	if c.Exists(ctx, CurrentKey(rs.Prefix)).Val() != 0 {
		t.Fatal("Stage published")
	}
	for _, i := range me.Shards { // the runner recomputes them
		if err := writeShard(ctx, s, run, i, i*1000, (i+1)*1000, 250, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stage(ctx, run, committed); err != nil {
		t.Fatalf("Stage after recompute: %v", err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, c, rs.Prefix, run, 5000, 1)
}

// waitAcked waits until the writer's pipelines acknowledged n rows.
func waitAcked(t *testing.T, w *shardWriter, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.rows.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d rows acknowledged", w.rows.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStageAfterEvictions: evictions on the server after a shard started
// make it suspect, even when they hit other keys (Redis does not say
// which); a shard written after the last eviction is trusted.
func TestStageAfterEvictions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// volatile-lru evicts only keys with a TTL: the run's keys have none,
	// so what this test checks is the counter, not a lost marker.
	rs := testservers.NewRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru")
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.TTL = jobs.Duration{} })
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := writeShard(ctx, s, run, 0, 0, 100, 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(ctx, run, committedShards(100)); err != nil {
		t.Fatalf("Stage before evictions: %v", err)
	}
	filler := strings.Repeat("x", 10_000)
	for i := 0; i < 1000; i++ {
		if err := c.Set(ctx, "filler:"+strconv.Itoa(i), filler, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.nodeStates(ctx)
	if err != nil || st[0].Evicted == 0 {
		t.Fatalf("no evictions happened (%+v, %v)", st, err)
	}
	// Memory back under the limit: no more evictions from here on.
	for i := 0; i < 1000; i++ {
		c.Unlink(ctx, "filler:"+strconv.Itoa(i))
	}
	if err := writeShard(ctx, s, run, 1, 100, 200, 100, 0); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, s.Stage(ctx, run, committedShards(100, 100)), "evicted", 0)
}

// TestLock: a second writer is refused and told who holds the namespace;
// a holder that stops renewing loses the lock after its TTL (Lost fires)
// and the second takes over; Release never deletes another's lock.
func TestLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s1 := newTestSink(t, rs, nil)
	s2 := newTestSink(t, rs, nil)
	s1.lockTTL, s2.lockTTL = 600*time.Millisecond, 600*time.Millisecond
	run1, run2 := testRun("v1"), testRun("v2")
	h1, h2 := sinks.ThisProcess(run1), sinks.ThisProcess(run2)
	h2.PID++
	l1, err := s1.Lock(ctx, run1, h1)
	if err != nil {
		t.Fatal(err)
	}
	// Renewals keep it held well past its TTL.
	time.Sleep(1500 * time.Millisecond)
	_, err = s2.Lock(ctx, run2, h2)
	var le *sinks.LockedError
	if !errors.As(err, &le) || le.Holder != h1 {
		t.Fatalf("second Lock = %v, want a LockedError naming %+v", err, h1)
	}
	if !strings.Contains(err.Error(), rs.Prefix+":lock") {
		t.Fatalf("error %q does not name the lock key", err)
	}
	select {
	case <-l1.Lost():
		t.Fatal("a renewed lock reports lost")
	default:
	}
	// The first holder hangs: no renewals. Its lease lapses, it learns
	// so from Lost, and the second writer gets the namespace.
	l1.(*redisLock).Freeze()
	select {
	case <-l1.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost did not fire after the lease lapsed")
	}
	var l2 sinks.Lock
	deadline := time.Now().Add(5 * time.Second)
	for l2 == nil {
		if l2, err = s2.Lock(ctx, run2, h2); err != nil && time.Now().After(deadline) {
			t.Fatalf("takeover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The first holder's Release must not delete the second's lock.
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, rs.Prefix+":lock").Val(); !strings.Contains(v, `"run_id":"`+run2.RunID+`"`) {
		t.Fatalf("after the old holder's Release the lock holds %q, want the second holder", v)
	}
	// A lock replaced behind the holder's back is lost at the next renewal.
	c.Set(ctx, rs.Prefix+":lock", `{"holder":{"run_id":"intruder"},"token":"x"}`, time.Minute)
	select {
	case <-l2.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost did not fire after the lock was replaced")
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, rs.Prefix+":lock").Val(); !strings.Contains(v, "intruder") {
		t.Fatalf("Release deleted another's lock: %q", v)
	}
}

// TestLockSurvivesRestartAndResume: a lock the server lost (a restart
// without persistence) is taken again at the next renewal instead of
// stopping the run; a lock left by a killed earlier process of the same run
// is taken over at once, while another run's is refused.
func TestLockSurvivesRestartAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s1 := newTestSink(t, rs, nil)
	s1.lockTTL = 600 * time.Millisecond
	run := testRun("v1")
	l1, err := s1.Lock(ctx, run, sinks.ThisProcess(run))
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, rs.Prefix+":lock") // what a restart without persistence does
	// The next renewal takes it again (an event, waited for with a bound).
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(c.Get(ctx, rs.Prefix+":lock").Val(), run.RunID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lock was not taken again: %q", c.Get(ctx, rs.Prefix+":lock").Val())
		}
	}
	select {
	case <-l1.Lost():
		t.Fatal("the lock was declared lost although nobody else took it")
	default:
	}
	// The process dies without releasing; a new process of the same run
	// takes over at once, a process of another run is refused.
	l1.(*redisLock).Freeze()
	s2 := newTestSink(t, rs, nil)
	other := testRun("v2")
	h := sinks.ThisProcess(other)
	h.PID++
	var le *sinks.LockedError
	if _, err := s2.Lock(ctx, other, h); !errors.As(err, &le) {
		t.Fatalf("another run's Lock = %v, want a LockedError", err)
	}
	resumed := sinks.ThisProcess(run)
	resumed.PID += 2
	l2, err := s2.Lock(ctx, run, resumed)
	if err != nil {
		t.Fatalf("the same run's new process could not take over: %v", err)
	}
	if v := c.Get(ctx, rs.Prefix+":lock").Val(); !strings.Contains(v, fmt.Sprintf(`"pid":%d`, resumed.PID)) {
		t.Fatalf("lock after takeover: %q", v)
	}
	_ = l2.Release(ctx)
}
