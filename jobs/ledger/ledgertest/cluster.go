package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// createIn creates a run of n shards in pool with priority.
func createIn(t *testing.T, l ledger.Ledger, job, pool string, priority, n int) jobs.Run {
	t.Helper()
	r, shards := newRun(job, "", n)
	r.Pool, r.Priority = pool, priority
	if err := l.CreateRun(context.Background(), r, shards); err != nil {
		t.Fatalf("CreateRun(%s): %v", r.ID, err)
	}
	return r
}

func claimNext(t *testing.T, l ledger.Cluster, pool, worker string, lease time.Duration) (jobs.Run, jobs.Shard) {
	t.Helper()
	r, s, err := l.ClaimNext(context.Background(), ledger.ClaimNextParams{Pool: pool, Worker: worker, Lease: lease})
	if err != nil {
		t.Fatalf("ClaimNext(%s, %s): %v", pool, worker, err)
	}
	if s.Worker != worker || s.State != jobs.ShardRunning || s.RunID != r.ID {
		t.Fatalf("ClaimNext(%s, %s) = run %s shard %+v, want running, held by %s", pool, worker, r.ID, s, worker)
	}
	return r, s
}

// testFencing: a lease taken over after expiry leaves the old holder able
// to change nothing.
func testFencing(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := createIn(t, l, "recs", "p", 0, 1)
	_, s := claimNext(t, l, "p", "old", shortLease)
	if s.Attempts != 1 {
		t.Fatalf("first claim attempt = %d, want 1", s.Attempts)
	}
	time.Sleep(3 * shortLease)
	gr, s2 := claimNext(t, l, "p", "new", longLease)
	if gr.ID != r.ID || s2.Index != s.Index || s2.Attempts != 2 || s2.Speculative {
		t.Fatalf("takeover claim = run %s %+v, want run %s shard %d attempt 2", gr.ID, s2, r.ID, s.Index)
	}
	before := mustShard(t, l, r.ID, s.Index)
	wantErr(t, "Heartbeat by the old holder", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: "old", Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "Complete by the old holder", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "old", Counts: jobs.Counts{RowsOut: 99}}), ledger.ErrLeaseLost)
	wantErr(t, "Fail by the old holder", l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "old", Msg: "late", Retry: true, MaxAttempts: 3}), ledger.ErrLeaseLost)
	wantErr(t, "Release by the old holder", l.Release(ctx, ledger.ReleaseParams{RunID: r.ID, Shard: s.Index, Worker: "old"}), ledger.ErrLeaseLost)
	after := mustShard(t, l, r.ID, s.Index)
	if after.State != jobs.ShardRunning || after.Worker != "new" || after.Attempts != 2 || after.Error != "" ||
		!after.LeaseUntil.Equal(before.LeaseUntil) || after.Counts != (jobs.Counts{}) {
		t.Fatalf("shard after the old holder's calls = %+v, want unchanged %+v", after, before)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "new", Counts: jobs.Counts{RowsOut: 7}}); err != nil {
		t.Fatalf("Complete by the new holder: %v", err)
	}
	if got := mustRun(t, l, r.ID); got.Counts.RowsOut != 7 {
		t.Fatalf("run RowsOut = %d, want 7", got.Counts.RowsOut)
	}
}

// testClaimNextSkipping: a worker passes over the runs it cannot execute
// and claims the pool's other runs' shards; with every run skipped there is
// nothing to claim, the shards left for other workers.
func testClaimNextSkipping(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	a := createIn(t, l, "recs", "p", 5, 2) // the higher priority: claimed first
	b := createIn(t, l, "scores", "p", 0, 1)
	r, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: "w1", Lease: longLease, Skip: []string{a.ID}})
	if err != nil || r.ID != b.ID || s.Worker != "w1" {
		t.Fatalf("ClaimNext(Skip %s) = run %s shard %+v, %v; want run %s", a.ID, r.ID, s, err, b.ID)
	}
	if _, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: "w1", Lease: longLease, Skip: []string{a.ID, b.ID}}); !errors.Is(err, ledger.ErrNoShard) {
		t.Fatalf("ClaimNext skipping every run = %+v, %v; want ErrNoShard", s, err)
	}
	if r, _ := claimNext(t, l, "p", "w2", longLease); r.ID != a.ID {
		t.Fatalf("ClaimNext by another worker = run %s, want the skipped run %s", r.ID, a.ID)
	}
	for i := range 2 {
		if got := mustShard(t, l, a.ID, i); got.Attempts > 1 || got.Worker == "w1" {
			t.Fatalf("skipped run's shard %d = %+v, want not claimed by w1", i, got)
		}
	}
}

// straggler sets up a run of 4 shards in pool "p": shards 0-2 committed
// after about 40ms each, shard 3 held by "slow". It returns the run.
func straggler(t *testing.T, l ledger.Cluster) jobs.Run {
	t.Helper()
	ctx := context.Background()
	r := createIn(t, l, "recs", "p", 0, 4)
	start := time.Now()
	for i := range 3 {
		claimNext(t, l, "p", fmt.Sprintf("w%d", i), longLease)
	}
	time.Sleep(40 * time.Millisecond)
	for i := range 3 {
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: i, Worker: fmt.Sprintf("w%d", i), Counts: jobs.Counts{RowsIn: 10, RowsOut: 10}}); err != nil {
			t.Fatalf("Complete(%d): %v", i, err)
		}
	}
	// No committed shard took longer than this, so neither did the median.
	bound := time.Since(start)
	claimed := time.Now()
	if _, s := claimNext(t, l, "p", "slow", longLease); s.Index != 3 {
		t.Fatalf("claimed shard %d, want 3", s.Index)
	}
	// Not a straggler yet: nothing to claim.
	if _, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: "idle", Lease: longLease}); !errors.Is(err, ledger.ErrNoShard) {
		t.Fatalf("ClaimNext right after the last claim = %+v, %v; want ErrNoShard", s, err)
	}
	time.Sleep(time.Until(claimed.Add(ledger.StragglerFactor*bound + 100*time.Millisecond)))
	return r
}

// testSpeculative: a straggler is leased to a second worker; the first
// Complete wins, the other is refused and counts are not doubled.
func testSpeculative(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := straggler(t, l)
	gr, s := claimNext(t, l, "p", "spec", longLease)
	if gr.ID != r.ID || s.Index != 3 || !s.Speculative || s.Attempts != 2 {
		t.Fatalf("speculative claim = run %s %+v, want shard 3 speculative attempt 2", gr.ID, s)
	}
	if _, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: "third", Lease: longLease}); !errors.Is(err, ledger.ErrNoShard) {
		t.Fatalf("a third lease of the straggler = %+v, %v; want ErrNoShard", s, err)
	}
	for _, w := range []string{"slow", "spec"} {
		if err := l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: 3, Worker: w, Lease: longLease}); err != nil {
			t.Fatalf("Heartbeat by %s: %v", w, err)
		}
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 3, Worker: "spec", Counts: jobs.Counts{RowsIn: 5, RowsOut: 5}}); err != nil {
		t.Fatalf("Complete by the speculative holder: %v", err)
	}
	wantErr(t, "Complete by the slower holder", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 3, Worker: "slow", Counts: jobs.Counts{RowsIn: 5, RowsOut: 5}}), ledger.ErrLeaseLost)
	wantErr(t, "Heartbeat by the slower holder", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: 3, Worker: "slow", Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "Fail by the slower holder", l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: 3, Worker: "slow", Msg: "x", Retry: true, MaxAttempts: 3}), ledger.ErrLeaseLost)
	if got := mustShard(t, l, r.ID, 3); got.State != jobs.ShardCommitted || got.Counts.RowsOut != 5 {
		t.Fatalf("shard 3 = %+v, want committed with 5 rows", got)
	}
	if got := mustRun(t, l, r.ID); got.Counts != (jobs.Counts{RowsIn: 35, RowsOut: 35}) {
		t.Fatalf("run counts = %+v, want 35/35 (no double count)", got.Counts)
	}
}

// testSpeculativeFail: one attempt of a doubly leased shard failing leaves
// the shard running under the other.
func testSpeculativeFail(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := straggler(t, l)
	if _, s := claimNext(t, l, "p", "spec", longLease); !s.Speculative {
		t.Fatalf("claim = %+v, want speculative", s)
	}
	if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: 3, Worker: "slow", Msg: "oom", Retry: true, MaxAttempts: 3}); err != nil {
		t.Fatalf("Fail by the first holder: %v", err)
	}
	if got := mustShard(t, l, r.ID, 3); got.State != jobs.ShardRunning {
		t.Fatalf("shard 3 after one holder failed = %+v, want still running", got)
	}
	if _, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: "other", Lease: longLease}); !errors.Is(err, ledger.ErrNoShard) {
		t.Fatalf("ClaimNext while the other attempt runs = %+v, %v; want ErrNoShard", s, err)
	}
	wantErr(t, "Heartbeat by the failed holder", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: 3, Worker: "slow", Lease: longLease}), ledger.ErrLeaseLost)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 3, Worker: "spec", Counts: jobs.Counts{RowsOut: 1}}); err != nil {
		t.Fatalf("Complete by the remaining holder: %v", err)
	}
}

// testPublishOnce: concurrent ClaimPublish callers, one wins; the losers
// can neither heartbeat nor finish the publish.
func testPublishOnce(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := createIn(t, l, "recs", "p", 0, 2)
	_, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "early", Lease: longLease})
	wantErr(t, "ClaimPublish before shards committed", err, ledger.ErrNoShard)
	for range 2 {
		_, s := claimNext(t, l, "p", "w", longLease)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w", Counts: jobs.Counts{RowsOut: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if due, err := l.PublishDue(ctx, "p"); err != nil || fmt.Sprint(due) != fmt.Sprint([]string{r.ID}) {
		t.Fatalf("PublishDue = %v, %v; want [%s]", due, err, r.ID)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := fmt.Sprintf("p%d", i)
			got, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: w, Lease: longLease})
			switch {
			case err == nil:
				if got.State != jobs.RunPublishing || got.ID != r.ID {
					t.Errorf("ClaimPublish by %s = %+v, want run %s publishing", w, got, r.ID)
				}
				mu.Lock()
				winners = append(winners, w)
				mu.Unlock()
			case !errors.Is(err, ledger.ErrNoShard):
				t.Errorf("ClaimPublish by %s: %v, want ErrNoShard", w, err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("ClaimPublish winners = %v, want exactly one", winners)
	}
	winner, loser := winners[0], "p0"
	if winner == loser {
		loser = "p1"
	}
	if due, err := l.PublishDue(ctx, "p"); err != nil || len(due) != 0 {
		t.Fatalf("PublishDue while held = %v, %v; want none", due, err)
	}
	wantErr(t, "HeartbeatPublish by a loser", l.HeartbeatPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: loser, Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "FinishPublish by a loser", l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: r.ID, Worker: loser, State: jobs.RunSucceeded, Msg: ""}), ledger.ErrLeaseLost)
	if got := mustRun(t, l, r.ID); got.State != jobs.RunPublishing {
		t.Fatalf("run after a loser's FinishPublish = %s, want publishing", got.State)
	}
	if err := l.HeartbeatPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: winner, Lease: longLease}); err != nil {
		t.Fatalf("HeartbeatPublish by the winner: %v", err)
	}
	if err := l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: r.ID, Worker: winner, State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatalf("FinishPublish by the winner: %v", err)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunSucceeded || got.Counts.RowsOut != 2 {
		t.Fatalf("published run = %+v, want succeeded with 2 rows", got)
	}
	_, err = l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: loser, Lease: longLease})
	wantErr(t, "ClaimPublish of a published run", err, ledger.ErrRunFinished)
}

// testPublishTakeover: a publisher whose lease expired is replaced; its
// late calls change nothing. The dead publisher's lease is 2 s: a second
// claim within it is refused (checked only when it came within the lease:
// a busy machine may take longer between the two calls), and the
// takeover waits for the ledger to list the run as due (bounded), not for
// a sleep.
func testPublishTakeover(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := createIn(t, l, "recs", "p", 0, 0) // no shards: publishable at once
	const lease = 2 * time.Second
	began := time.Now()
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "dead", Lease: lease}); err != nil {
		t.Fatalf("ClaimPublish: %v", err)
	}
	_, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "second", Lease: longLease})
	if time.Since(began) < lease {
		wantErr(t, "ClaimPublish while the lease is live", err, ledger.ErrNoShard)
	}
	if err == nil {
		// The second claim came after the lease (a busy machine): it holds
		// the publish now, as the takeover below would have made it.
		takeoverChecks(t, l, r.ID)
		return
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		due, err := l.PublishDue(ctx, "p")
		if err != nil {
			t.Fatalf("PublishDue: %v", err)
		}
		if len(due) == 1 && due[0] == r.ID {
			break
		}
		if len(due) > 1 || time.Now().After(deadline) {
			t.Fatalf("PublishDue after the publisher died = %v; want [%s] (waited 30s)", due, r.ID)
		}
	}
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "second", Lease: longLease}); err != nil {
		t.Fatalf("ClaimPublish after the lease expired: %v", err)
	}
	takeoverChecks(t, l, r.ID)
}

// takeoverChecks: with "second" holding run r's publish after "dead"'s
// lease expired, dead's late calls change nothing and second finishes it.
func takeoverChecks(t *testing.T, l ledger.Store, id string) {
	ctx := context.Background()
	wantErr(t, "HeartbeatPublish by the dead publisher", l.HeartbeatPublish(ctx, ledger.PublishLeaseParams{RunID: id, Worker: "dead", Lease: longLease}), ledger.ErrLeaseLost)
	wantErr(t, "FinishPublish by the dead publisher", l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: id, Worker: "dead", State: jobs.RunFailed, Msg: "late"}), ledger.ErrLeaseLost)
	if got := mustRun(t, l, id); got.State != jobs.RunPublishing || got.Error != "" {
		t.Fatalf("run after the dead publisher's calls = %+v, want publishing, no error", got)
	}
	if err := l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: id, Worker: "second", State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatalf("FinishPublish: %v", err)
	}
	wantErr(t, "FinishPublish twice", l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: id, Worker: "second", State: jobs.RunSucceeded, Msg: ""}), ledger.ErrLeaseLost)
}

// testPriorityFairShare: higher priority first; equal priorities alternate
// by running shards; other pools untouched.
func testPriorityFairShare(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	a := createIn(t, l, "backfill", "p", 0, 4)
	time.Sleep(2 * time.Millisecond)
	b := createIn(t, l, "refresh", "p", 0, 4)
	h := createIn(t, l, "urgent", "p", 5, 2)
	other := createIn(t, l, "elsewhere", "q", 100, 1)
	var got []string
	for i := range 6 {
		r, s := claimNext(t, l, "p", fmt.Sprintf("w%d", i), longLease)
		if r.Pool != "p" || (r.ID == h.ID && r.Priority != 5) {
			t.Fatalf("claimed run %+v, want pool p with its priority", r)
		}
		got = append(got, fmt.Sprintf("%s/%d", r.Job, s.Index))
	}
	want := []string{"urgent/0", "urgent/1", "backfill/0", "refresh/0", "backfill/1", "refresh/1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claim order = %v, want %v (priority, then fair share, then age)", got, want)
	}
	// A run with fewer running shards goes first even when younger.
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: b.ID, Shard: 0, Worker: "w3", Counts: jobs.Counts{}}); err != nil {
		t.Fatal(err)
	}
	if r, _ := claimNext(t, l, "p", "w9", longLease); r.ID != b.ID {
		t.Fatalf("claimed run %s, want %s (fewer running shards)", r.ID, b.ID)
	}
	if r, _ := claimNext(t, l, "q", "wq", longLease); r.ID != other.ID {
		t.Fatalf("ClaimNext(q) = %s, want %s", r.ID, other.ID)
	}
	_ = a
}

// wakeSettle lets a fresh Wake subscription's start-up signals pass.
func wakeSettle(ch <-chan struct{}) {
	time.Sleep(300 * time.Millisecond)
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func wantWake(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Wake did not fire within 5s", what)
	}
}

func wantNoWake(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: Wake fired", what)
	case <-time.After(300 * time.Millisecond):
	}
}

// testCancelWakes: cancelling a run wakes its pool, its holders' calls
// fail with ErrRunFinished, and nothing more is claimed.
func testCancelWakes(t *testing.T, l ledger.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := createIn(t, l, "recs", "p", 0, 3)
	_, s := claimNext(t, l, "p", "w1", longLease)
	ch := l.Wake(ctx, "p")
	wakeSettle(ch)
	if err := l.SetRunState(ctx, r.ID, jobs.RunCancelled, "cancelled by user"); err != nil {
		t.Fatalf("SetRunState(cancelled): %v", err)
	}
	wantWake(t, "cancel", ch)
	err := l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Lease: longLease})
	if !errors.Is(err, ledger.ErrRunFinished) || !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("Heartbeat of a cancelled run's shard = %v, want ErrRunFinished and ErrLeaseLost", err)
	}
	wantErr(t, "Complete of a cancelled run's shard", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsOut: 1}}), ledger.ErrRunFinished)
	if got := mustShard(t, l, r.ID, s.Index); got.State == jobs.ShardCommitted {
		t.Fatalf("a cancelled run's shard was committed")
	}
	if _, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: "w2", Lease: longLease}); !errors.Is(err, ledger.ErrNoShard) {
		t.Fatalf("ClaimNext after cancel = %+v, %v; want ErrNoShard", s, err)
	}
	_, err = l.Claim(ctx, r.ID, "w2", longLease)
	wantErr(t, "Claim after cancel", err, ledger.ErrRunFinished)
	_, err = l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "w2", Lease: longLease})
	wantErr(t, "ClaimPublish after cancel", err, ledger.ErrRunFinished)
}

// testWakeNotices: creating a run, releasing and retrying a shard wake the
// run's pool and only it; Wake's channel closes with its context.
func testWakeNotices(t *testing.T, l ledger.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	chP, chQ := l.Wake(ctx, "p"), l.Wake(ctx, "q")
	wakeSettle(chP)
	wakeSettle(chQ)
	r := createIn(t, l, "recs", "p", 0, 2)
	wantWake(t, "CreateRun", chP)
	wantNoWake(t, "pool q after a run was created in p", chQ)
	_, s := claimNext(t, l, "p", "w1", longLease)
	if err := l.Release(ctx, ledger.ReleaseParams{RunID: r.ID, Shard: s.Index, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, "Release", chP)
	_, s = claimNext(t, l, "p", "w1", longLease)
	if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Msg: "flaky", Retry: true, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, "Fail with a retry left", chP)
	cancel()
	select {
	case _, ok := <-chP:
		if ok { // a signal may have been buffered; the close follows
			if _, ok := <-chP; ok {
				t.Fatalf("Wake channel still open after its context ended")
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Wake channel not closed after its context ended")
	}
}

// testConcurrentClaimNext: 16 workers drain two runs through ClaimNext; a
// shard never has two live non-speculative holders, each shard commits
// exactly once and run counts are exact.
func testConcurrentClaimNext(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	const workers, shards = 16, 60
	runs := []jobs.Run{createIn(t, l, "a", "p", 0, shards), createIn(t, l, "b", "p", 0, shards)}
	type key struct {
		run string
		idx int
	}
	var (
		mu        sync.Mutex
		holders   = map[key]map[string]bool{} // live holders
		committed = map[key]string{}
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("w%d", w)
			for {
				r, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: name, Lease: longLease})
				if errors.Is(err, ledger.ErrNoShard) {
					return
				}
				if err != nil {
					t.Errorf("%s: ClaimNext: %v", name, err)
					return
				}
				k := key{r.ID, s.Index}
				mu.Lock()
				if _, done := committed[k]; done {
					t.Errorf("%s claimed committed shard %v", name, k)
				}
				if len(holders[k]) > 0 && !s.Speculative || len(holders[k]) > 1 {
					t.Errorf("%s claimed shard %v held by %v (speculative %v)", name, k, holders[k], s.Speculative)
				}
				if holders[k] == nil {
					holders[k] = map[string]bool{}
				}
				holders[k][name] = true
				mu.Unlock()
				err = l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: name, Counts: jobs.Counts{RowsIn: 2, RowsOut: 1}})
				mu.Lock()
				delete(holders[k], name)
				switch {
				case err == nil:
					if prev, dup := committed[k]; dup {
						t.Errorf("shard %v committed by %s and %s", k, prev, name)
					}
					committed[k] = name
				case errors.Is(err, ledger.ErrLeaseLost) && s.Speculative || errors.Is(err, ledger.ErrLeaseLost) && committed[k] != "":
					// The other attempt of a doubly leased shard won.
				default:
					t.Errorf("%s: Complete(%v): %v", name, k, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(committed) != 2*shards {
		t.Fatalf("committed %d shards, want %d", len(committed), 2*shards)
	}
	for _, r := range runs {
		if got := mustRun(t, l, r.ID); got.Counts != (jobs.Counts{RowsIn: 2 * shards, RowsOut: shards}) {
			t.Fatalf("run %s counts = %+v, want RowsIn %d RowsOut %d", r.ID, got.Counts, 2*shards, shards)
		}
	}
}

// testPoolLoad: PoolLoad counts the pool's pending and leased shards of
// open runs and its runs being published; other pools and finished runs
// do not count.
func testPoolLoad(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	load := func(what string, want ledger.PoolLoad) {
		t.Helper()
		got, err := l.PoolLoad(ctx, "p")
		if err != nil || got != want {
			t.Fatalf("%s: PoolLoad(p) = %+v, %v; want %+v", what, got, err, want)
		}
	}
	claim := func(runID string) jobs.Shard {
		t.Helper()
		s, err := l.Claim(ctx, runID, "w", longLease)
		if err != nil {
			t.Fatalf("Claim(%s): %v", runID, err)
		}
		return s
	}
	load("empty pool", ledger.PoolLoad{})
	a := createIn(t, l, "a", "p", 0, 3)
	b := createIn(t, l, "b", "p", 0, 2)
	c := createIn(t, l, "c", "p", 0, 4)
	createIn(t, l, "elsewhere", "q", 0, 5)
	load("three runs", ledger.PoolLoad{Pending: 9})
	claim(a.ID)
	claim(c.ID)
	load("two leased", ledger.PoolLoad{Pending: 7, Running: 2})
	if err := l.SetRunState(ctx, c.ID, jobs.RunCancelled, "cancelled by user"); err != nil {
		t.Fatal(err)
	}
	load("run c cancelled", ledger.PoolLoad{Pending: 4, Running: 1})
	for range 2 {
		s := claim(b.ID)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: b.ID, Shard: s.Index, Worker: "w", Counts: jobs.Counts{RowsOut: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: b.ID, Worker: "pub", Lease: longLease}); err != nil {
		t.Fatal(err)
	}
	load("run b publishing", ledger.PoolLoad{Pending: 2, Running: 1, Publishing: 1})
}

// testCancelEndsShards: a cancel moves the run's open shards to a terminal
// state in its own transaction (no shard is pending or running after it),
// a running shard keeps its holder's lease mark until that holder stops,
// and the holder's Release clears the mark while still reporting the run
// finished.
func testCancelEndsShards(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := createIn(t, l, "recs", "p", 0, 3)
	_, s0 := claimNext(t, l, "p", "w1", longLease)
	_, s1 := claimNext(t, l, "p", "w2", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s1.Index, Worker: "w2", Counts: jobs.Counts{RowsIn: 5, RowsOut: 5}}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := l.SetRunState(ctx, r.ID, jobs.RunCancelled, "cancelled by user"); err != nil {
		t.Fatalf("SetRunState(cancelled): %v", err)
	}
	shards, err := l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatalf("Shards: %v", err)
	}
	for _, s := range shards {
		switch {
		case s.Index == s1.Index:
			if s.State != jobs.ShardCommitted {
				t.Fatalf("committed shard %d after cancel = %s, want committed", s.Index, s.State)
			}
		case s.State != jobs.ShardFailed:
			t.Fatalf("shard %d of a cancelled run = %s, want failed (terminal)", s.Index, s.State)
		}
	}
	held := mustShard(t, l, r.ID, s0.Index)
	if held.Worker != "w1" || held.LeaseUntil.IsZero() {
		t.Fatalf("the held shard after cancel = %+v, want w1's lease mark kept until w1 stops", held)
	}
	wantErr(t, "Heartbeat of a cancelled run's shard", l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s0.Index, Worker: "w1", Lease: longLease}), ledger.ErrRunFinished)
	wantErr(t, "Release by a cancelled run's holder", l.Release(ctx, ledger.ReleaseParams{RunID: r.ID, Shard: s0.Index, Worker: "w1"}), ledger.ErrRunFinished)
	if got := mustShard(t, l, r.ID, s0.Index); got.State != jobs.ShardFailed || !got.LeaseUntil.IsZero() {
		t.Fatalf("the shard after its holder let go = %+v, want failed with no lease mark", got)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunCancelled {
		t.Fatalf("run = %s, want cancelled", got.State)
	}
}

// testCancelRefusesPublishing: a run whose publish step a worker holds
// cannot be cancelled (ErrPublishing, decided under the same lock that
// reads the state), even once the publisher's lease lapsed (another
// worker takes the publish over and finishes it); the publisher then
// finishes it. A run moved to publishing without a publish lease (the
// embedded ledger's single process) stays cancellable.
func testCancelRefusesPublishing(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := createIn(t, l, "recs", "p", 0, 1)
	_, s := claimNext(t, l, "p", "w1", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "pub", Lease: shortLease}); err != nil {
		t.Fatalf("ClaimPublish: %v", err)
	}
	wantErr(t, "cancel of a publishing run", l.SetRunState(ctx, r.ID, jobs.RunCancelled, "cancel"), ledger.ErrPublishing)
	time.Sleep(3 * shortLease)
	wantErr(t, "cancel of a run whose publisher's lease lapsed", l.SetRunState(ctx, r.ID, jobs.RunCancelled, "cancel"), ledger.ErrPublishing)
	if got := mustRun(t, l, r.ID); got.State != jobs.RunPublishing {
		t.Fatalf("run after refused cancels = %s, want publishing", got.State)
	}
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "pub2", Lease: longLease}); err != nil {
		t.Fatalf("ClaimPublish takeover: %v", err)
	}
	if err := l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: r.ID, Worker: "pub2", State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatalf("FinishPublish: %v", err)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunSucceeded {
		t.Fatalf("run = %s, want succeeded", got.State)
	}

	local := createIn(t, l, "other", "p", 0, 1)
	if err := l.SetRunState(ctx, local.ID, jobs.RunPublishing, ""); err != nil {
		t.Fatalf("SetRunState(publishing): %v", err)
	}
	if err := l.SetRunState(ctx, local.ID, jobs.RunCancelled, "abandoned"); err != nil {
		t.Fatalf("cancel of a run publishing without a publish lease: %v", err)
	}
}

// testCheckClaim: a fresh ledger lets this process claim; a check that
// cannot ask (its context ended) says so instead of passing.
func testCheckClaim(t *testing.T, l ledger.Store) {
	if err := l.CheckClaim(context.Background()); err != nil {
		t.Fatalf("CheckClaim of a fresh ledger: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.CheckClaim(ctx); err == nil {
		t.Fatal("CheckClaim with an ended context passed")
	}
}
