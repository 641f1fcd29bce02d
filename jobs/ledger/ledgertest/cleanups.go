package ledgertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// endedIn is a run of job in pool with n shards, ended in state (failed or
// cancelled) with its shard 0 committed when n > 1.
func endedIn(t *testing.T, l ledger.Store, job, pool string, n int, state jobs.RunState) jobs.Run {
	t.Helper()
	ctx := context.Background()
	r := createIn(t, l, job, pool, 0, n)
	if n > 1 {
		s := claim(t, l, r.ID, "w0", longLease)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w0", Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	if err := l.SetRunState(ctx, r.ID, state, "shard out of attempts"); err != nil {
		t.Fatalf("SetRunState(%s, %s): %v", r.ID, state, err)
	}
	return r
}

// cleanupsSupported records a cleanup of r due in dueIn and reports
// whether the ledger keeps them; a ledger that does not says
// ledger.ErrUnsupported on every method (what consumers branch on).
func cleanupsSupported(t *testing.T, l ledger.Store, r jobs.Run, dueIn time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: r.ID, Reason: "redis down", DueIn: dueIn})
	if !errors.Is(err, ledger.ErrUnsupported) {
		if err != nil {
			t.Fatalf("AddCleanup(%s): %v", r.ID, err)
		}
		return true
	}
	if _, err := l.CleanupsDue(ctx, "gpu", 10); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("CleanupsDue of a ledger without cleanups: %v, want ErrUnsupported", err)
	}
	if _, err := l.PendingCleanup(ctx, r.ID); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("PendingCleanup of a ledger without cleanups: %v, want ErrUnsupported", err)
	}
	if err := l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w1", Lease: longLease}); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("BeginCleanup of a ledger without cleanups: %v, want ErrUnsupported", err)
	}
	if err := l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: r.ID}); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("CleanupDone of a ledger without cleanups: %v, want ErrUnsupported", err)
	}
	return false
}

func dueIn(t *testing.T, l ledger.Store, pool string, limit int) []string {
	t.Helper()
	ids, err := l.CleanupsDue(context.Background(), pool, limit)
	if err != nil {
		t.Fatalf("CleanupsDue(%s): %v", pool, err)
	}
	return ids
}

// testCleanups: a ledger either keeps pending sink cleanups per pool,
// oldest first, replacing the reason of a run recorded again, until
// CleanupDone; or it keeps none (cleanupsSupported). A run that is not
// failed or cancelled gets no record: its data is in use.
func testCleanups(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r1 := endedIn(t, l, "recs", "gpu", 1, jobs.RunCancelled)
	r2 := endedIn(t, l, "users", "gpu", 1, jobs.RunCancelled)
	if !cleanupsSupported(t, l, r1, 0) {
		return
	}
	if err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: r2.ID, Reason: "redis down"}); err != nil {
		t.Fatalf("AddCleanup: %v", err)
	}
	if err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: r1.ID, Reason: "still down"}); err != nil {
		t.Fatalf("AddCleanup again: %v", err)
	}
	if got := dueIn(t, l, "gpu", 10); !slices.Equal(got, []string{r1.ID, r2.ID}) {
		t.Fatalf("CleanupsDue(gpu) = %v, want [%s %s] (oldest first, once each)", got, r1.ID, r2.ID)
	}
	if got := dueIn(t, l, "gpu", 1); !slices.Equal(got, []string{r1.ID}) {
		t.Fatalf("CleanupsDue(gpu, 1) = %v, want [%s]", got, r1.ID)
	}
	if got := dueIn(t, l, ledger.DefaultPool, 10); len(got) != 0 {
		t.Fatalf("CleanupsDue(default) = %v, want none (the runs are in pool gpu)", got)
	}
	if c, err := l.PendingCleanup(ctx, r1.ID); err != nil || c.Reason != "still down" || c.Pool != "gpu" {
		t.Fatalf("PendingCleanup(%s) = %+v, %v; want the reason recorded last, pool gpu", r1.ID, c, err)
	}
	wantErr(t, "AddCleanup of an unknown run", l.AddCleanup(ctx, ledger.CleanupParams{RunID: "no-such-run", Reason: "x"}), ledger.ErrNotFound)
	open := createIn(t, l, "open", "gpu", 0, 1)
	wantErr(t, "AddCleanup of an open run", l.AddCleanup(ctx, ledger.CleanupParams{RunID: open.ID, Reason: "x"}), ledger.ErrRunOpen)
	if err := l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: r1.ID}); err != nil {
		t.Fatalf("CleanupDone: %v", err)
	}
	if err := l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: r1.ID}); err != nil {
		t.Fatalf("CleanupDone of a cleared run: %v, want nil", err)
	}
	wantErr(t, "PendingCleanup of a cleared run", func() error { _, err := l.PendingCleanup(ctx, r1.ID); return err }(), ledger.ErrNotFound)
	if got := dueIn(t, l, "gpu", 10); !slices.Equal(got, []string{r2.ID}) {
		t.Fatalf("CleanupsDue(gpu) after CleanupDone(%s) = %v, want [%s]", r1.ID, got, r2.ID)
	}
}

// testCleanupsDueLater: a failed run's cleanup due in an hour (its staged
// data kept for a retry) is recorded with that due time but neither
// listed nor claimable; recorded again due now, it is both. Recording a
// claimed cleanup again ends the claim (a holder whose cleanup failed
// releases it so).
func testCleanupsDueLater(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	later := endedIn(t, l, "recs", "gpu", 2, jobs.RunFailed)
	now := endedIn(t, l, "users", "gpu", 1, jobs.RunFailed)
	before := time.Now()
	if !cleanupsSupported(t, l, later, time.Hour) {
		return
	}
	if err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: now.ID, Reason: "checks failed"}); err != nil {
		t.Fatalf("AddCleanup: %v", err)
	}
	if got := dueIn(t, l, "gpu", 10); !slices.Equal(got, []string{now.ID}) {
		t.Fatalf("CleanupsDue(gpu) = %v, want only [%s] (%s is due in an hour)", got, now.ID, later.ID)
	}
	c, err := l.PendingCleanup(ctx, later.ID)
	// The ledger's clock may differ from this process's a little.
	if err != nil || c.DueAt.Before(before.Add(59*time.Minute)) || c.DueAt.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("PendingCleanup(%s) = %+v, %v; want due in an hour", later.ID, c, err)
	}
	wantErr(t, "BeginCleanup of a cleanup not due", l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: later.ID, Holder: "w1", Lease: longLease}), ledger.ErrNotFound)
	if err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: later.ID, Reason: "kept long enough"}); err != nil {
		t.Fatalf("AddCleanup due now: %v", err)
	}
	if got := dueIn(t, l, "gpu", 10); len(got) != 2 || !slices.Contains(got, later.ID) {
		t.Fatalf("CleanupsDue(gpu) after recording %s due now = %v, want both runs", later.ID, got)
	}
	if err := l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: later.ID, Holder: "w1", Lease: longLease}); err != nil {
		t.Fatalf("BeginCleanup of a due cleanup: %v", err)
	}
	if got := dueIn(t, l, "gpu", 10); !slices.Equal(got, []string{now.ID}) {
		t.Fatalf("CleanupsDue(gpu) with %s claimed = %v, want [%s]", later.ID, got, now.ID)
	}
	// Recorded again (w1's cleanup failed), the claim ends: w2 may try.
	if err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: later.ID, Reason: "redis down"}); err != nil {
		t.Fatalf("AddCleanup of a claimed cleanup: %v", err)
	}
	if err := l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: later.ID, Holder: "w2", Lease: longLease}); err != nil {
		t.Fatalf("BeginCleanup(w2) once w1's claim was released: %v", err)
	}
	wantErr(t, "CleanupDone(w1) of w2's claim", l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: later.ID, Holder: "w1"}), ledger.ErrLeaseLost)
	if err := l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: later.ID, Holder: "w2"}); err != nil {
		t.Fatalf("CleanupDone(w2): %v", err)
	}
}

// testCleanupRetryTakesBack: RetryRun of a failed run whose staged data
// is kept deletes its pending cleanup with the reopening: nothing is
// listed or claimable for it any more, and its committed shard is kept.
func testCleanupRetryTakesBack(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := endedIn(t, l, "recs", "gpu", 2, jobs.RunFailed)
	if !cleanupsSupported(t, l, r, time.Hour) {
		return
	}
	if _, err := l.RetryRun(ctx, r.ID); err != nil {
		t.Fatalf("RetryRun: %v", err)
	}
	wantErr(t, "PendingCleanup of a retried run", func() error { _, err := l.PendingCleanup(ctx, r.ID); return err }(), ledger.ErrNotFound)
	wantErr(t, "BeginCleanup of a retried run", l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w1", Lease: longLease}), ledger.ErrNotFound)
	wantErr(t, "AddCleanup of a retried run", l.AddCleanup(ctx, ledger.CleanupParams{RunID: r.ID, Reason: "late"}), ledger.ErrRunOpen)
	if got := dueIn(t, l, "gpu", 10); len(got) != 0 {
		t.Fatalf("CleanupsDue(gpu) after the retry = %v, want none", got)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunRunning || countState(t, l, r.ID, jobs.ShardCommitted) != 1 {
		t.Fatalf("run after RetryRun = %s, want running with its committed shard kept", got.State)
	}
}

// testCleanupFence: a claimed cleanup fences the retry and other holders.
// While w1's claim is live, RetryRun is ErrCleaning and changes nothing,
// and w2 can neither claim nor clear it. Once w1's lease ends, RetryRun
// reopens the run and deletes the record: w1, thawed, cannot finish the
// cleanup of the retried run (CleanupDone is ErrLeaseLost).
func testCleanupFence(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := endedIn(t, l, "recs", "gpu", 2, jobs.RunFailed)
	if !cleanupsSupported(t, l, r, 0) {
		return
	}
	if err := l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w1", Lease: longLease}); err != nil {
		t.Fatalf("BeginCleanup(w1): %v", err)
	}
	if _, err := l.RetryRun(ctx, r.ID); !errors.Is(err, ledger.ErrCleaning) {
		t.Fatalf("RetryRun while w1 cleans = %v, want ErrCleaning", err)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunFailed {
		t.Fatalf("run after a refused RetryRun is %s, want failed", got.State)
	}
	wantErr(t, "BeginCleanup(w2) while w1 cleans", l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w2", Lease: longLease}), ledger.ErrCleaning)
	wantErr(t, "CleanupDone(w2) of w1's claim", l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: r.ID, Holder: "w2"}), ledger.ErrLeaseLost)
	wantErr(t, "BeginCleanup(w1) while its own claim is live", l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w1", Lease: longLease}), ledger.ErrCleaning)
	// w1 releases its claim (recording the cleanup again) and claims again
	// with a lease of a microsecond: over by the next statement on the
	// ledger's clock.
	if err := l.AddCleanup(ctx, ledger.CleanupParams{RunID: r.ID, Reason: "again"}); err != nil {
		t.Fatalf("AddCleanup (release): %v", err)
	}
	if err := l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w1", Lease: time.Microsecond}); err != nil {
		t.Fatalf("BeginCleanup(w1) again: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := l.RetryRun(ctx, r.ID)
		if err == nil {
			break
		}
		if !errors.Is(err, ledger.ErrCleaning) || time.Now().After(deadline) {
			t.Fatalf("RetryRun once w1's lease ended = %v, want nil", err)
		}
		time.Sleep(time.Millisecond)
	}
	wantErr(t, "CleanupDone(w1) of a retried run", l.CleanupDone(ctx, ledger.CleanupDoneParams{RunID: r.ID, Holder: "w1"}), ledger.ErrLeaseLost)
	wantErr(t, "BeginCleanup(w1) of a retried run", l.BeginCleanup(ctx, ledger.BeginCleanupParams{RunID: r.ID, Holder: "w1", Lease: longLease}), ledger.ErrNotFound)
	if got := mustRun(t, l, r.ID); got.State != jobs.RunRunning {
		t.Fatalf("run after RetryRun is %s, want running", got.State)
	}
}

// countState counts runID's shards in state.
func countState(t *testing.T, l ledger.Ledger, runID string, state jobs.ShardState) int {
	t.Helper()
	ss, err := l.Shards(context.Background(), runID)
	if err != nil {
		t.Fatalf("Shards(%s): %v", runID, err)
	}
	n := 0
	for _, s := range ss {
		if s.State == state {
			n++
		}
	}
	return n
}
