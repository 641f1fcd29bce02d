package backfill

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// seedBackfill records backfill id of job j with one pending run of one
// shard per value (run ids "r"+value), created an hour ago.
func seedBackfill(t *testing.T, led Ledger, id string, values ...string) ledger.Backfill {
	t.Helper()
	t0 := time.Now().Add(-time.Hour)
	var add []ledger.BackfillRun
	for i, v := range values {
		rid := "r" + v
		add = append(add, ledger.BackfillRun{Value: v,
			Run:    jobs.Run{ID: rid, Job: "j", Version: "v" + v, ParamsKey: "date=" + v, State: jobs.RunPending, Shards: 1, Pool: "default", CreatedAt: t0.Add(time.Duration(i) * time.Minute)},
			Shards: []jobs.Shard{{RunID: rid, State: jobs.ShardPending}}})
	}
	b := ledger.Backfill{ID: id, Job: "j", Param: "date", From: values[0], To: values[len(values)-1], Step: "1d", Parallel: 1, Pool: "default"}
	if err := led.CreateBackfill(context.Background(), b, add); err != nil {
		t.Fatal(err)
	}
	got, err := led.Backfill(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func boltLedger(t *testing.T, dir string) *bolt.Ledger {
	t.Helper()
	led, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	return led
}

// setState moves run id to state, failing the test on an error.
func setState(t *testing.T, led Ledger, id string, state jobs.RunState, msg string) {
	t.Helper()
	if err := led.SetRunState(context.Background(), id, state, msg); err != nil {
		t.Fatalf("%s -> %s: %v", id, state, err)
	}
}

// TestWatchFollowsUntilDone: Watch reads the backfill until every value
// ended and hands each read to OnRead, changed only when more than the
// clock moved (a read with no ledger change is unchanged though its
// duration grew); it ends with nil when the backfill succeeded. The
// ledger moves from inside OnRead, so the test waits on reads, not time.
func TestWatchFollowsUntilDone(t *testing.T) {
	ctx := context.Background()
	led := boltLedger(t, t.TempDir())
	b := seedBackfill(t, led, "j-bf-1", "2026-11-01", "2026-11-02")
	var changed []bool
	var ended []int
	v, err := Watch(ctx, ClusterReader(led, b.ID), b.ID, FollowOptions{Every: time.Millisecond, OnRead: func(v View, c bool) {
		changed, ended = append(changed, c), append(ended, v.Ended())
		switch len(changed) {
		case 1:
			setState(t, led, "r2026-11-01", jobs.RunSucceeded, "")
		case 3: // read 2 changed nothing: read 3 is unchanged
			setState(t, led, "r2026-11-02", jobs.RunSucceeded, "")
		}
	}})
	if err != nil || v.State != string(jobs.RunSucceeded) {
		t.Fatalf("Watch = %s, %v; want succeeded, nil", v.State, err)
	}
	if want := []bool{true, true, false, true}; !slices.Equal(changed, want) {
		t.Errorf("changed per read = %v, want %v", changed, want)
	}
	if want := []int{0, 1, 1, 2}; !slices.Equal(ended, want) {
		t.Errorf("values ended per read = %v, want %v", ended, want)
	}
}

// TestWatchEnds: a failed value ends the watch with the backfill's error;
// an unknown id is ledger.ErrNotFound; an open backfill that nothing
// executes (the embedded ledger, no process holding it) is an
// *InterruptedError at the first read.
func TestWatchEnds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	led := boltLedger(t, dir)
	b := seedBackfill(t, led, "j-bf-1", "2026-11-01", "2026-11-02")
	setState(t, led, "r2026-11-01", jobs.RunSucceeded, "")
	setState(t, led, "r2026-11-02", jobs.RunFailed, "boom")
	if _, err := Watch(ctx, ClusterReader(led, b.ID), b.ID, FollowOptions{}); err == nil || !strings.Contains(err.Error(), "failed: 2026-11-02: boom") {
		t.Errorf("failed backfill: %v", err)
	}
	if _, err := Watch(ctx, ClusterReader(led, "nope"), "nope", FollowOptions{}); !errors.Is(err, ledger.ErrNotFound) || err.Error() != "backfill nope: not found" {
		t.Errorf("unknown id: %v, want backfill nope: not found", err)
	}
	open := seedBackfill(t, led, "j-bf-2", "2026-11-03")
	reads := 0
	_, err := Watch(ctx, LocalReader(dir, open.ID), open.ID, FollowOptions{OnRead: func(View, bool) { reads++ }})
	var ie *InterruptedError
	if !errors.As(err, &ie) || ie.ID != open.ID || reads != 1 {
		t.Errorf("open backfill, no process: %v after %d reads; want *InterruptedError after 1", err, reads)
	}
	if _, err := Watch(ctx, LocalReader(dir, "nope"), "nope", FollowOptions{}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown id, embedded ledger: %v", err)
	}
}

// TestWaitStopsFollowing: ending the context stops Wait, saying the
// backfill goes on in the ledger (context.Canceled, exit 130).
func TestWaitStopsFollowing(t *testing.T) {
	led := boltLedger(t, t.TempDir())
	b := seedBackfill(t, led, "j-bf-1", "2026-11-01")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := Wait(ctx, led, b.ID, FollowOptions{OnRead: func(View, bool) { cancel() }})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped following (it goes on in the ledger)") {
		t.Errorf("Wait after cancel = %v", err)
	}
	if v.ID != b.ID || v.State != string(jobs.RunPending) {
		t.Errorf("last view %s %s, want %s pending", v.ID, v.State, b.ID)
	}
}

// TestSnapshotView: a busy ledger's backfill is read from the snapshot
// its process keeps, as of when it was written.
func TestSnapshotView(t *testing.T) {
	at := time.Now().Add(-time.Minute)
	b := ledger.Backfill{ID: "j-bf-1", Job: "j", Param: "date", Parallel: 1, CreatedAt: at.Add(-10 * time.Second),
		Dates: []ledger.BackfillDate{{Value: "2026-11-01", Runs: []string{"r1"}}}}
	s := ledger.Snapshot{WrittenAt: at, Backfills: []ledger.Backfill{b},
		Runs:   []jobs.Run{{ID: "r1", Job: "j", State: jobs.RunRunning, Shards: 2, CreatedAt: b.CreatedAt}},
		Shards: map[string][]jobs.Shard{"r1": {{RunID: "r1", State: jobs.ShardCommitted}, {RunID: "r1", Index: 1, State: jobs.ShardRunning}}}}
	snap := ViewSnapshot(t.TempDir(), s)
	v, ok := snap.Backfill(b.ID)
	if !ok || v.State != string(jobs.RunRunning) || len(v.Dates) != 1 || v.Dates[0].Run != "r1" || v.Shards.Committed != 1 || v.DurationS != 10 {
		t.Errorf("Backfill of the snapshot = %+v, %v; want running, r1 with 1 committed shard, 10 s as of the snapshot", v, ok)
	}
	if _, ok := snap.Backfill("other"); ok {
		t.Error("the snapshot found a backfill the snapshot lacks")
	}
}
