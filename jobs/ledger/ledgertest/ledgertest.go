// Package ledgertest is the conformance suite every ledger.Store passes, so
// that `precog run` (embedded) and the cluster (Postgres) agree on run and
// shard semantics: leases, retries, resume and concurrent claims. One file
// per interface the Store embeds; Exercise lists every case.
package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// shortLease is long enough for a few calls, short enough to expire in tests.
const shortLease = 50 * time.Millisecond

// longLease never expires within a test.
const longLease = time.Minute

// Exercise runs the whole suite: every case of every interface that
// ledger.Store embeds, one list, so that a case missing here is missing
// for both ledgers alike. newLedger returns an empty ledger private to the
// calling (sub)test; the suite closes it. Its Wake should poll rarely (a
// minute or more), so that the suite can tell notices from polls.
func Exercise(t *testing.T, newLedger func(t *testing.T) ledger.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, l ledger.Store)
	}{
		// ledger.Ledger (this file; RejectSample in rejects.go)
		{"CreateGetList", testCreateGetList},
		{"CreateDuplicate", testCreateDuplicate},
		{"JobNames", testJobNames},
		{"OpenRun", testOpenRun},
		{"ClaimOrder", testClaimOrder},
		{"ClaimExpiredLease", testClaimExpiredLease},
		{"ClaimFinishedRun", testClaimFinishedRun},
		{"LeaseLost", testLeaseLost},
		{"CompleteCounts", testCompleteCounts},
		{"CompleteCost", testCompleteCost},
		{"FailRetry", testFailRetry},
		{"FailNoRetry", testFailNoRetry},
		{"Release", testRelease},
		{"RetryFailed", testRetryFailed},
		{"RetryRun", testRetryRun},
		{"Reopen", testReopen},
		{"RejectSample", testRejectSample},
		{"SetRunState", testSetRunState},
		{"NotFound", testNotFound},
		{"ConcurrentClaims", testConcurrentClaims},
		// ledger.Scheduler (scheduler.go)
		{"SchedulerTicks", testSchedulerTicks},
		{"SchedulerLead", testSchedulerLead},
		{"SchedulerFirstSeen", testSchedulerFirstSeen},
		// ledger.Cluster (cluster.go)
		{"Fencing", testFencing},
		{"ClaimNextSkipping", testClaimNextSkipping},
		{"Speculative", testSpeculative},
		{"SpeculativeFail", testSpeculativeFail},
		{"PublishOnce", testPublishOnce},
		{"PublishTakeover", testPublishTakeover},
		{"PriorityAndFairShare", testPriorityFairShare},
		{"CancelWakes", testCancelWakes},
		{"CancelEndsShards", testCancelEndsShards},
		{"CancelRefusesPublishing", testCancelRefusesPublishing},
		{"WakeNotices", testWakeNotices},
		{"ConcurrentClaimNext", testConcurrentClaimNext},
		{"PoolLoad", testPoolLoad},
		{"CheckClaim", testCheckClaim},
		// ledger.Checks (checks.go)
		{"ChecksHold", testChecksHold},
		// ledger.Cleanups (cleanups.go)
		{"Cleanups", testCleanups},
		{"CleanupsDueLater", testCleanupsDueLater},
		{"CleanupRetryTakesBack", testCleanupRetryTakesBack},
		{"CleanupFence", testCleanupFence},
		// ledger.Workers (workers.go)
		{"Workers", testWorkers},
		{"WorkerUnable", testWorkerUnable},
		// ledger.Rejects (rejects.go)
		{"RejectsStore", testRejectsStore},
		{"RejectsCap", testRejectsCap},
		// ledger.Backfills (backfill.go)
		{"Backfill", testBackfill},
		{"BackfillRetryRun", testBackfillRetryRun},
		// ledger.Snapshots (snapshots.go)
		{"Snapshots", testSnapshots},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLedger(t)
			t.Cleanup(func() {
				if err := l.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			c.fn(t, l)
		})
	}
}

var runSeq struct {
	sync.Mutex
	n int
}

// newRun builds a run with n planned shards and a unique id.
func newRun(job, paramsKey string, n int) (jobs.Run, []jobs.Shard) {
	runSeq.Lock()
	runSeq.n++
	seq := runSeq.n
	runSeq.Unlock()
	id := fmt.Sprintf("%s-%d-%d", job, time.Now().UnixNano(), seq)
	r := jobs.Run{
		ID:           id,
		Job:          job,
		Version:      fmt.Sprintf("v%d", seq),
		Params:       map[string]string{"date": "2024-11-01"},
		ParamsKey:    paramsKey,
		SpecHash:     "spechash",
		ModelVersion: "abcdef012345",
		Spec:         []byte("name: " + job + "\n"),
	}
	shards := make([]jobs.Shard, n)
	for i := range shards {
		plan, _ := json.Marshal(map[string]any{"file": fmt.Sprintf("part-%d.parquet", i), "row_group": i})
		shards[i] = jobs.Shard{RunID: id, Index: i, Plan: plan, EstRows: int64(1000 + i)}
	}
	return r, shards
}

func create(t *testing.T, l ledger.Ledger, job, paramsKey string, n int) jobs.Run {
	t.Helper()
	r, shards := newRun(job, paramsKey, n)
	if err := l.CreateRun(context.Background(), r, shards); err != nil {
		t.Fatalf("CreateRun(%s): %v", r.ID, err)
	}
	return r
}

func mustShard(t *testing.T, l ledger.Ledger, runID string, i int) jobs.Shard {
	t.Helper()
	ss, err := l.Shards(context.Background(), runID)
	if err != nil {
		t.Fatalf("Shards(%s): %v", runID, err)
	}
	for _, s := range ss {
		if s.Index == i {
			return s
		}
	}
	t.Fatalf("run %s has no shard %d", runID, i)
	return jobs.Shard{}
}

func mustRun(t *testing.T, l ledger.Ledger, id string) jobs.Run {
	t.Helper()
	r, err := l.Run(context.Background(), id)
	if err != nil {
		t.Fatalf("Run(%s): %v", id, err)
	}
	return r
}

func claim(t *testing.T, l ledger.Ledger, runID, worker string, lease time.Duration) jobs.Shard {
	t.Helper()
	s, err := l.Claim(context.Background(), runID, worker, lease)
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", runID, worker, err)
	}
	return s
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func testCreateGetList(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r, shards := newRun("recs", "date=2024-11-01", 3)
	if err := l.CreateRun(ctx, r, shards); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	got := mustRun(t, l, r.ID)
	if got.ID != r.ID || got.Job != r.Job || got.Version != r.Version || got.ParamsKey != r.ParamsKey ||
		got.SpecHash != r.SpecHash || got.ModelVersion != r.ModelVersion || string(got.Spec) != string(r.Spec) ||
		got.Params["date"] != "2024-11-01" {
		t.Fatalf("Run round trip: got %+v, want %+v", got, r)
	}
	if got.State != jobs.RunPending {
		t.Errorf("new run state = %s, want pending", got.State)
	}
	if got.Shards != 3 {
		t.Errorf("new run Shards = %d, want 3", got.Shards)
	}
	if got.CreatedAt.IsZero() {
		t.Errorf("new run CreatedAt is zero")
	}
	ss, err := l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatalf("Shards: %v", err)
	}
	if len(ss) != 3 {
		t.Fatalf("Shards: got %d, want 3", len(ss))
	}
	for i, s := range ss {
		if s.Index != i || s.RunID != r.ID || s.State != jobs.ShardPending || s.Attempts != 0 || s.EstRows != int64(1000+i) {
			t.Errorf("shard %d = %+v, want pending index %d attempts 0 est %d", i, s, i, 1000+i)
		}
		var plan map[string]any
		if err := json.Unmarshal(s.Plan, &plan); err != nil || plan["file"] != fmt.Sprintf("part-%d.parquet", i) {
			t.Errorf("shard %d plan = %s (%v), want file part-%d.parquet", i, s.Plan, err, i)
		}
	}

	// Newest first, per job and overall, with limits.
	time.Sleep(2 * time.Millisecond)
	r2 := create(t, l, "recs", "date=2024-11-02", 1)
	time.Sleep(2 * time.Millisecond)
	r3 := create(t, l, "ranker", "", 0)
	all, err := l.Runs(ctx, "", 0)
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	if ids := runIDs(all); fmt.Sprint(ids) != fmt.Sprint([]string{r3.ID, r2.ID, r.ID}) {
		t.Errorf("Runs(all) = %v, want [%s %s %s]", ids, r3.ID, r2.ID, r.ID)
	}
	recs, err := l.Runs(ctx, "recs", 0)
	if err != nil {
		t.Fatalf("Runs(recs): %v", err)
	}
	if ids := runIDs(recs); fmt.Sprint(ids) != fmt.Sprint([]string{r2.ID, r.ID}) {
		t.Errorf("Runs(recs) = %v, want [%s %s]", ids, r2.ID, r.ID)
	}
	one, err := l.Runs(ctx, "", 1)
	if err != nil {
		t.Fatalf("Runs(limit 1): %v", err)
	}
	if ids := runIDs(one); fmt.Sprint(ids) != fmt.Sprint([]string{r3.ID}) {
		t.Errorf("Runs(limit 1) = %v, want [%s]", ids, r3.ID)
	}
	if ss, err := l.Shards(ctx, r3.ID); err != nil || len(ss) != 0 {
		t.Errorf("Shards(run with none) = %v, %v; want empty", ss, err)
	}
}

func runIDs(rs []jobs.Run) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

func testCreateDuplicate(t *testing.T, l ledger.Store) {
	r, shards := newRun("recs", "k", 2)
	if err := l.CreateRun(context.Background(), r, shards); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if err := l.CreateRun(context.Background(), r, shards); err == nil {
		t.Fatalf("CreateRun with an existing id succeeded")
	}
}

func testOpenRun(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	_, err := l.OpenRun(ctx, "recs", "date=1")
	wantErr(t, "OpenRun on empty ledger", err, ledger.ErrNotFound)

	old := create(t, l, "recs", "date=1", 1)
	create(t, l, "recs", "date=2", 1)
	create(t, l, "other", "date=1", 1)
	// A second open run of the same (job, params) is refused, naming the open one.
	dup, shards := newRun("recs", "date=1", 1)
	err = l.CreateRun(ctx, dup, shards)
	wantErr(t, "CreateRun of a second open run", err, ledger.ErrRunOpen)
	var oe *ledger.OpenRunError
	if !errors.As(err, &oe) || oe.RunID != old.ID || !strings.Contains(err.Error(), old.ID) {
		t.Fatalf("CreateRun of a second open run = %v, want an OpenRunError naming %s", err, old.ID)
	}
	if _, err := l.Run(ctx, dup.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("refused run %s was stored: %v", dup.ID, err)
	}

	got, err := l.OpenRun(ctx, "recs", "date=1")
	if err != nil || got.ID != old.ID {
		t.Fatalf("OpenRun = %s, %v; want open run %s", got.ID, err, old.ID)
	}
	// Running and publishing runs are still open.
	claim(t, l, old.ID, "w1", longLease)
	if err := l.SetRunState(ctx, old.ID, jobs.RunPublishing, ""); err != nil {
		t.Fatalf("SetRunState(publishing): %v", err)
	}
	if got, err = l.OpenRun(ctx, "recs", "date=1"); err != nil || got.ID != old.ID || got.State != jobs.RunPublishing {
		t.Fatalf("OpenRun of a publishing run = %s (%s), %v; want %s publishing", got.ID, got.State, err, old.ID)
	}
	if err := l.SetRunState(ctx, old.ID, jobs.RunFailed, "boom"); err != nil {
		t.Fatalf("SetRunState(failed): %v", err)
	}
	_, err = l.OpenRun(ctx, "recs", "date=1")
	wantErr(t, "OpenRun with only terminal runs", err, ledger.ErrNotFound)
	// Once the open run is terminal, a new one may start.
	newer := create(t, l, "recs", "date=1", 1)
	if got, err := l.OpenRun(ctx, "recs", "date=1"); err != nil || got.ID != newer.ID {
		t.Fatalf("OpenRun after a new run = %s, %v; want %s", got.ID, err, newer.ID)
	}
	if got, err := l.OpenRun(ctx, "recs", "date=2"); err != nil || got.ParamsKey != "date=2" {
		t.Fatalf("OpenRun(date=2) = %+v, %v", got, err)
	}

	// Racing creators of one (job, params): exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, shards := newRun("race", "date=9", 2)
			err := l.CreateRun(ctx, r, shards)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, ledger.ErrRunOpen):
				t.Errorf("racing CreateRun: %v, want ErrRunOpen", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d racing CreateRuns of one (job, params) succeeded, want 1", won)
	}
}

func testClaimOrder(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 3)
	for i := range 3 {
		s := claim(t, l, r.ID, "w1", longLease)
		if s.Index != i {
			t.Fatalf("claim %d got shard %d, want index order", i, s.Index)
		}
		if s.State != jobs.ShardRunning || s.Attempts != 1 || s.Worker != "w1" || s.RunID != r.ID {
			t.Fatalf("claimed shard = %+v, want running, attempts 1, worker w1", s)
		}
		if d := time.Until(s.LeaseUntil); d < longLease-10*time.Second || d > longLease+10*time.Second {
			t.Fatalf("claimed shard lease until %v (in %v), want about %v from now", s.LeaseUntil, d, longLease)
		}
		if i == 0 {
			if got := mustRun(t, l, r.ID); got.State != jobs.RunRunning {
				t.Fatalf("run state after first claim = %s, want running", got.State)
			}
		}
	}
	_, err := l.Claim(ctx, r.ID, "w2", longLease)
	wantErr(t, "Claim with every shard leased", err, ledger.ErrNoShard)
	for i := range 3 {
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: i, Worker: "w1", Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}}); err != nil {
			t.Fatalf("Complete(%d): %v", i, err)
		}
	}
	_, err = l.Claim(ctx, r.ID, "w2", longLease)
	wantErr(t, "Claim with every shard committed", err, ledger.ErrNoShard)
}

// testClaimExpiredLease: a shard whose holder's lease (2 s) expired is
// claimed again, by the next claim after the expiry (waited for by
// claiming, bounded; a claim within the lease is refused, checked only
// when it came within it: a busy machine may take longer).
func testClaimExpiredLease(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 2)
	const lease = 2 * time.Second
	began := time.Now()
	s0 := claim(t, l, r.ID, "dead", lease)
	claim(t, l, r.ID, "alive", longLease)
	s, err := l.Claim(ctx, r.ID, "w2", longLease)
	if time.Since(began) < lease {
		wantErr(t, "Claim before the lease expired", err, ledger.ErrNoShard)
	}
	for deadline := time.Now().Add(30 * time.Second); errors.Is(err, ledger.ErrNoShard); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("shard %d not claimable 30s after its 2s lease", s0.Index)
		}
		s, err = l.Claim(ctx, r.ID, "w2", longLease)
	}
	if err != nil {
		t.Fatalf("Claim after the lease expired: %v", err)
	}
	if s.Index != s0.Index || s.Worker != "w2" || s.Attempts != 2 || s.State != jobs.ShardRunning {
		t.Fatalf("re-claim of expired lease = %+v, want shard %d worker w2 attempts 2", s, s0.Index)
	}
	_, err = l.Claim(ctx, r.ID, "w3", longLease)
	wantErr(t, "Claim after re-claim", err, ledger.ErrNoShard)
	// The dead worker's late calls are refused.
	wantErr(t, "Heartbeat by the expired worker", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s0.Index, Worker: "dead", Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "Complete by the expired worker", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s0.Index, Worker: "dead", Counts: jobs.Counts{RowsOut: 5}}), ledger.ErrLeaseLost)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s0.Index, Worker: "w2", Counts: jobs.Counts{RowsOut: 7}}); err != nil {
		t.Fatalf("Complete by the new holder: %v", err)
	}
	if got := mustRun(t, l, r.ID); got.Counts.RowsOut != 7 {
		t.Fatalf("run counts = %+v, want RowsOut 7 (the expired worker's Complete must not count)", got.Counts)
	}
}

func testClaimFinishedRun(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	for _, st := range []jobs.RunState{jobs.RunSucceeded, jobs.RunFailed, jobs.RunCancelled} {
		r := create(t, l, "recs", string(st), 2)
		if err := l.SetRunState(ctx, r.ID, st, ""); err != nil {
			t.Fatalf("SetRunState(%s): %v", st, err)
		}
		_, err := l.Claim(ctx, r.ID, "w1", longLease)
		wantErr(t, "Claim on a "+string(st)+" run", err, ledger.ErrRunFinished)
	}
	_, err := l.Claim(ctx, "no-such-run", "w1", longLease)
	wantErr(t, "Claim on a missing run", err, ledger.ErrNotFound)
}

func testLeaseLost(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 2)
	s := claim(t, l, r.ID, "w1", longLease)
	wantErr(t, "Heartbeat by the wrong worker", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: "w2", Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "Complete by the wrong worker", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w2", Counts: jobs.Counts{}}), ledger.ErrLeaseLost)
	wantErr(t, "Fail by the wrong worker", l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w2", Msg: "x", Retry: true, MaxAttempts: 3}), ledger.ErrLeaseLost)
	wantErr(t, "Release by the wrong worker", l.Release(ctx, ledger.ReleaseParams{RunID: r.ID, Shard: s.Index, Worker: "w2"}), ledger.ErrLeaseLost)
	wantErr(t, "Heartbeat on a pending shard", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: 1, Worker: "w1", Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "Complete on a pending shard", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 1, Worker: "w1", Counts: jobs.Counts{}}), ledger.ErrLeaseLost)

	// A heartbeat keeps a short lease alive past its first expiry, and a
	// holder whose lease expired has lost it, re-claimed or not. Each wait
	// is on the lease the ledger recorded, never on this machine's speed.
	hr, s1 := heartbeatedShard(t, l)
	_, err := l.Claim(ctx, hr, "w2", longLease)
	wantErr(t, "Claim of a heartbeating shard past its first lease", err, ledger.ErrNoShard)
	if got := mustShard(t, l, hr, s1.Index); got.Attempts != 1 || got.Worker != "w1" {
		t.Fatalf("after the heartbeat shard = %+v, want held by w1, attempts 1", got)
	}
	if err := l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: hr, Shard: s1.Index, Worker: "w1", Lease: shortLease}); err != nil {
		t.Fatalf("Heartbeat within a long lease: %v", err)
	}
	waitPast(mustShard(t, l, hr, s1.Index).LeaseUntil)
	wantErr(t, "Heartbeat after expiry", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: hr, Shard: s1.Index, Worker: "w1", Lease: shortLease}), ledger.ErrLeaseLost)
	wantErr(t, "Complete after expiry", l.Complete(ctx, ledger.CompleteParams{RunID: hr, Shard: s1.Index, Worker: "w1", Counts: jobs.Counts{}}), ledger.ErrLeaseLost)
	if got := mustShard(t, l, hr, s1.Index); got.State == jobs.ShardCommitted {
		t.Fatalf("Complete after expiry committed the shard")
	}
	if err := l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: "no-such-run", Shard: 0, Worker: "w1", Lease: longLease}); err == nil {
		t.Fatalf("Heartbeat on a missing run succeeded")
	}
}

// heartbeatedShard claims a one-shard run's shard for w1 with a short
// lease and extends it by a long heartbeat, then waits until the claim's
// own lease has passed. A machine too slow to heartbeat within the short
// lease gets a fresh run and a lease four times longer, at most 6 times
// (50ms to 51s), so the case never races the machine's speed.
func heartbeatedShard(t *testing.T, l ledger.Ledger) (string, jobs.Shard) {
	t.Helper()
	ctx := context.Background()
	lease := shortLease
	for try := 0; ; try++ {
		r := create(t, l, "heartbeat", fmt.Sprintf("try=%d", try), 1)
		s := claim(t, l, r.ID, "w1", lease)
		claimed := mustShard(t, l, r.ID, s.Index).LeaseUntil
		err := l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Lease: longLease})
		if errors.Is(err, ledger.ErrLeaseLost) && try < 5 {
			lease *= 4
			continue
		}
		if err != nil {
			t.Fatalf("Heartbeat within the lease (%v): %v", lease, err)
		}
		if got := mustShard(t, l, r.ID, s.Index).LeaseUntil; !got.After(claimed) {
			t.Fatalf("Heartbeat left the lease at %v, want after the claim's %v", got, claimed)
		}
		waitPast(claimed)
		return r.ID, s
	}
}

// waitPast sleeps until a lease ending at until has expired, with a margin
// for the clocks of a ledger on another process (the same machine's).
func waitPast(until time.Time) {
	time.Sleep(time.Until(until) + 3*shortLease)
}

func testCompleteCounts(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 3)
	want := jobs.Counts{}
	for i := range 3 {
		s := claim(t, l, r.ID, "w1", longLease)
		c := jobs.Counts{RowsIn: int64(100 * (i + 1)), RowsOut: int64(90 * (i + 1)), Rejected: int64(10 * (i + 1))}
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: c}); err != nil {
			t.Fatalf("Complete(%d): %v", s.Index, err)
		}
		want = want.Add(c)
		got := mustShard(t, l, r.ID, s.Index)
		if got.State != jobs.ShardCommitted || got.Counts != c {
			t.Fatalf("completed shard = %+v, want committed with %+v", got, c)
		}
	}
	if got := mustRun(t, l, r.ID); got.Counts != want {
		t.Fatalf("run counts = %+v, want %+v", got.Counts, want)
	}
	// A committed shard is no longer held: completing it again is refused
	// and counts are not added twice.
	wantErr(t, "Complete of a committed shard", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 0, Worker: "w1", Counts: jobs.Counts{RowsOut: 1}}), ledger.ErrLeaseLost)
	if got := mustRun(t, l, r.ID); got.Counts != want {
		t.Fatalf("run counts after a second Complete = %+v, want %+v", got.Counts, want)
	}
}

func testFailRetry(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 1)
	const maxAttempts = 3
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		s := claim(t, l, r.ID, "w1", longLease)
		if s.Attempts != attempt {
			t.Fatalf("attempt %d: claimed shard has Attempts %d", attempt, s.Attempts)
		}
		msg := fmt.Sprintf("read failed %d", attempt)
		if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Msg: msg, Retry: true, MaxAttempts: maxAttempts}); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		got := mustShard(t, l, r.ID, s.Index)
		want := jobs.ShardPending
		if attempt == maxAttempts {
			want = jobs.ShardFailed
		}
		if got.State != want || got.Error != msg || got.Attempts != attempt {
			t.Fatalf("after failed attempt %d: shard = %+v, want state %s error %q", attempt, got, want, msg)
		}
	}
	_, err := l.Claim(ctx, r.ID, "w1", longLease)
	wantErr(t, "Claim with the only shard failed", err, ledger.ErrNoShard)
}

func testFailNoRetry(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 1)
	s := claim(t, l, r.ID, "w1", longLease)
	if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Msg: "model output shape mismatch", Retry: false, MaxAttempts: 3}); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if got := mustShard(t, l, r.ID, s.Index); got.State != jobs.ShardFailed || got.Error != "model output shape mismatch" {
		t.Fatalf("after Fail(retry=false) shard = %+v, want failed", got)
	}
}

func testRelease(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 2)
	s := claim(t, l, r.ID, "w1", longLease)
	if err := l.Release(ctx, ledger.ReleaseParams{RunID: r.ID, Shard: s.Index, Worker: "w1"}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got := mustShard(t, l, r.ID, s.Index)
	if got.State != jobs.ShardPending || got.Attempts != 0 {
		t.Fatalf("released shard = %+v, want pending with attempts 0", got)
	}
	s2 := claim(t, l, r.ID, "w2", longLease)
	if s2.Index != s.Index || s2.Attempts != 1 {
		t.Fatalf("claim after release = %+v, want shard %d with attempts 1", s2, s.Index)
	}
	wantErr(t, "Release by the old worker", l.Release(ctx, ledger.ReleaseParams{RunID: r.ID, Shard: s.Index, Worker: "w1"}), ledger.ErrLeaseLost)
}

// testRetryRun: a failed run goes back to running with its failed shards
// pending and committed ones kept, or the ledger says ErrUnsupported and
// changes nothing; a succeeded run is ErrRunFinished either way.
func testRetryRun(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 2)
	for range 2 {
		s := claim(t, l, r.ID, "w1", longLease)
		if s.Index == 1 {
			if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsOut: 1}}); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			continue
		}
		if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Msg: "bad row group", Retry: false, MaxAttempts: 1}); err != nil {
			t.Fatalf("Fail: %v", err)
		}
	}
	if err := l.SetRunState(ctx, r.ID, jobs.RunFailed, "shard 0 failed"); err != nil {
		t.Fatal(err)
	}
	n, err := l.RetryRun(ctx, r.ID)
	switch {
	case errors.Is(err, ledger.ErrUnsupported):
		if got, gerr := l.Run(ctx, r.ID); gerr != nil || got.State != jobs.RunFailed || mustShard(t, l, r.ID, 0).State != jobs.ShardFailed {
			t.Fatalf("RetryRun unsupported changed the run: %+v, %v", got, gerr)
		}
	case err != nil || n != 1:
		t.Fatalf("RetryRun = %d, %v; want 1", n, err)
	default:
		if got, _ := l.Run(ctx, r.ID); got.State != jobs.RunRunning || got.Error != "" {
			t.Fatalf("run after RetryRun = %s %q, want running without error", got.State, got.Error)
		}
		if got := mustShard(t, l, r.ID, 0); got.State != jobs.ShardPending || got.Attempts != 0 {
			t.Fatalf("failed shard after RetryRun = %+v, want pending with attempts 0", got)
		}
		if got := mustShard(t, l, r.ID, 1); got.State != jobs.ShardCommitted {
			t.Fatalf("committed shard after RetryRun = %+v, want committed", got)
		}
	}
	done := create(t, l, "other", "", 1)
	s := claim(t, l, done.ID, "w1", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: done.ID, Shard: s.Index, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRunState(ctx, done.ID, jobs.RunSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := l.RetryRun(ctx, done.ID); !errors.Is(err, ledger.ErrRunFinished) {
		t.Fatalf("RetryRun of a succeeded run = %v, want ErrRunFinished", err)
	}
}

func testRetryFailed(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 3)
	for range 3 {
		s := claim(t, l, r.ID, "w1", longLease)
		if s.Index == 1 {
			if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsOut: 1}}); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			continue
		}
		if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Msg: "bad row group", Retry: false, MaxAttempts: 1}); err != nil {
			t.Fatalf("Fail: %v", err)
		}
	}
	n, err := l.RetryFailed(ctx, r.ID)
	if err != nil || n != 2 {
		t.Fatalf("RetryFailed = %d, %v; want 2", n, err)
	}
	for _, i := range []int{0, 2} {
		if got := mustShard(t, l, r.ID, i); got.State != jobs.ShardPending || got.Attempts != 0 {
			t.Fatalf("shard %d after RetryFailed = %+v, want pending with attempts 0", i, got)
		}
	}
	if got := mustShard(t, l, r.ID, 1); got.State != jobs.ShardCommitted {
		t.Fatalf("committed shard changed by RetryFailed: %+v", got)
	}
	for _, want := range []int{0, 2} {
		if s := claim(t, l, r.ID, "w2", longLease); s.Index != want || s.Attempts != 1 {
			t.Fatalf("claim after RetryFailed = %+v, want shard %d attempts 1", s, want)
		}
	}
	if n, err := l.RetryFailed(ctx, r.ID); err != nil || n != 0 {
		t.Fatalf("RetryFailed with none failed = %d, %v; want 0", n, err)
	}
	_, err = l.RetryFailed(ctx, "no-such-run")
	wantErr(t, "RetryFailed(missing run)", err, ledger.ErrNotFound)
}

func testSetRunState(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 1)
	for _, st := range []jobs.RunState{jobs.RunRunning, jobs.RunPublishing} {
		if err := l.SetRunState(ctx, r.ID, st, ""); err != nil {
			t.Fatalf("SetRunState(%s): %v", st, err)
		}
		if got := mustRun(t, l, r.ID); got.State != st {
			t.Fatalf("state = %s, want %s", got.State, st)
		}
	}
	if err := l.SetRunState(ctx, r.ID, jobs.RunFailed, "sink unreachable"); err != nil {
		t.Fatalf("SetRunState(failed): %v", err)
	}
	got := mustRun(t, l, r.ID)
	if got.State != jobs.RunFailed || got.Error != "sink unreachable" {
		t.Fatalf("failed run = %+v, want failed with its message", got)
	}
	for _, st := range []jobs.RunState{jobs.RunRunning, jobs.RunSucceeded, jobs.RunCancelled} {
		wantErr(t, "SetRunState("+string(st)+") on a failed run", l.SetRunState(ctx, r.ID, st, ""), ledger.ErrRunFinished)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunFailed || got.Error != "sink unreachable" {
		t.Fatalf("terminal run changed to %+v", got)
	}
	wantErr(t, "SetRunState on a missing run", l.SetRunState(ctx, "no-such-run", jobs.RunRunning, ""), ledger.ErrNotFound)
}

func testNotFound(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	_, err := l.Run(ctx, "no-such-run")
	wantErr(t, "Run(missing)", err, ledger.ErrNotFound)
	_, err = l.Shards(ctx, "no-such-run")
	wantErr(t, "Shards(missing)", err, ledger.ErrNotFound)
	r := create(t, l, "recs", "", 1)
	wantErr(t, "Complete of a missing shard", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 5, Worker: "w1", Counts: jobs.Counts{}}), ledger.ErrNotFound)
	if rs, err := l.Runs(ctx, "nobody", 0); err != nil || len(rs) != 0 {
		t.Fatalf("Runs(unknown job) = %v, %v; want empty", rs, err)
	}
}

// testConcurrentClaims: 8 workers drain 100 shards; every shard is claimed
// and committed exactly once and no shard is held by two workers.
func testConcurrentClaims(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	const workers, shards = 8, 100
	r := create(t, l, "recs", "", shards)
	var (
		mu      sync.Mutex
		claimed = map[int]string{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("w%d", w)
			for {
				s, err := l.Claim(ctx, r.ID, name, longLease)
				if errors.Is(err, ledger.ErrNoShard) {
					return
				}
				if err != nil {
					t.Errorf("%s: Claim: %v", name, err)
					return
				}
				mu.Lock()
				if prev, dup := claimed[s.Index]; dup {
					t.Errorf("shard %d claimed by %s and %s", s.Index, prev, name)
				}
				claimed[s.Index] = name
				mu.Unlock()
				if err := l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: name, Lease: longLease}); err != nil {
					t.Errorf("%s: Heartbeat(%d): %v", name, s.Index, err)
				}
				if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: name, Counts: jobs.Counts{RowsIn: 2, RowsOut: 1}}); err != nil {
					t.Errorf("%s: Complete(%d): %v", name, s.Index, err)
				}
			}
		}()
	}
	wg.Wait()
	if len(claimed) != shards {
		t.Fatalf("claimed %d distinct shards, want %d", len(claimed), shards)
	}
	ss, err := l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatalf("Shards: %v", err)
	}
	for _, s := range ss {
		if s.State != jobs.ShardCommitted || s.Attempts != 1 {
			t.Errorf("shard %d = %+v, want committed once by %s", s.Index, s, claimed[s.Index])
		}
	}
	if got := mustRun(t, l, r.ID); got.Counts != (jobs.Counts{RowsIn: 2 * shards, RowsOut: shards}) {
		t.Fatalf("run counts = %+v, want RowsIn %d RowsOut %d", got.Counts, 2*shards, shards)
	}
}

// testReopen: shards a sink lost at stage time go back to pending with their
// counts taken off the run's, and a publishing run goes back to running.
func testReopen(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 3)
	for range 3 {
		s := claim(t, l, r.ID, "w1", longLease)
		c := jobs.Counts{RowsIn: 10, RowsOut: 9, Rejected: 1, KeySketch: "AAAA"}
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: c}); err != nil {
			t.Fatalf("Complete(%d): %v", s.Index, err)
		}
	}
	if err := l.SetRunState(ctx, r.ID, jobs.RunPublishing, ""); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(ctx, r.ID, []int{1}, "redis lost shard 1"); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	got := mustRun(t, l, r.ID)
	if got.State != jobs.RunRunning {
		t.Fatalf("run state after Reopen = %s, want running", got.State)
	}
	if want := (jobs.Counts{RowsIn: 20, RowsOut: 18, Rejected: 2}); got.Counts != want {
		t.Fatalf("run counts after Reopen = %+v, want %+v", got.Counts, want)
	}
	s1 := mustShard(t, l, r.ID, 1)
	if s1.State != jobs.ShardPending || s1.Attempts != 0 || s1.Error != "redis lost shard 1" {
		t.Fatalf("reopened shard = %+v, want pending, 0 attempts, the reason", s1)
	}
	if s0 := mustShard(t, l, r.ID, 0); s0.State != jobs.ShardCommitted || s0.Counts.KeySketch != "AAAA" {
		t.Fatalf("untouched shard = %+v, want committed with its sketch", s0)
	}
	// The reopened shard is claimable again; the others are not.
	if s := claim(t, l, r.ID, "w2", longLease); s.Index != 1 {
		t.Fatalf("claimed shard %d after Reopen, want 1", s.Index)
	}
	// A terminal run cannot be reopened.
	if err := l.SetRunState(ctx, r.ID, jobs.RunFailed, "x"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Reopen of a finished run", l.Reopen(ctx, r.ID, []int{0}, "x"), ledger.ErrRunFinished)
}

// testJobNames: JobNames lists each job with a run once, by name, whatever
// the runs' states.
func testJobNames(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	if got, err := l.JobNames(ctx); err != nil || len(got) != 0 {
		t.Fatalf("JobNames of an empty ledger = %v, %v; want none", got, err)
	}
	r := create(t, l, "users", "a", 1)
	create(t, l, "recs", "a", 1)
	if err := l.SetRunState(ctx, r.ID, jobs.RunCancelled, "x"); err != nil {
		t.Fatal(err)
	}
	create(t, l, "users", "a", 1)
	got, err := l.JobNames(ctx)
	if err != nil || strings.Join(got, ",") != "recs,users" {
		t.Fatalf("JobNames = %v, %v; want [recs users]", got, err)
	}
}

// testCompleteCost: a shard's cost is stored with its commit and read back
// with the shard; the run's cost is its committed shards' summed; Reopen
// takes a shard's cost off with its counts; a shard committed without a
// cost (as by a version that recorded none) reads as zero.
func testCompleteCost(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "costs", "", 3)
	costs := []jobs.Cost{
		{CPUSeconds: 1.5, DeviceSeconds: 2.25, GPUSampledSeconds: 2, GPUBusySeconds: 1.5, GPURows: 1000},
		{CPUSeconds: 0.75},
		{},
	}
	for range costs {
		s := claim(t, l, r.ID, "w1", longLease)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1",
			Counts: jobs.Counts{RowsIn: 10, RowsOut: 10}, Cost: costs[s.Index]}); err != nil {
			t.Fatalf("Complete(%d): %v", s.Index, err)
		}
	}
	shards, err := l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range shards {
		if s.Cost != costs[i] {
			t.Errorf("shard %d cost %+v, want %+v", i, s.Cost, costs[i])
		}
	}
	want := costs[0].Add(costs[1])
	if got := jobs.SumCost(shards); got != want {
		t.Errorf("run cost %+v, want %+v", got, want)
	}
	if err := l.Reopen(ctx, r.ID, []int{0}, "lost in a sink"); err != nil {
		t.Fatal(err)
	}
	if s := mustShard(t, l, r.ID, 0); !s.Cost.IsZero() {
		t.Errorf("reopened shard keeps cost %+v", s.Cost)
	}
	shards, err = l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := jobs.SumCost(shards); got != costs[1] {
		t.Errorf("run cost after reopen %+v, want %+v", got, costs[1])
	}
}
