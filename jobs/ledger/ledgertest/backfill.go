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

// backfillChild builds the run of one value of a backfill of job.
func backfillChild(job, value string) ledger.BackfillRun {
	r, shards := newRun(job, "date="+value, 1)
	r.Params = map[string]string{"date": value}
	r.Pool, r.Priority = "bf", -1
	return ledger.BackfillRun{Value: value, Run: r, Shards: shards}
}

// finish commits a claimed one-shard run and publishes it as state.
func finish(t *testing.T, l ledger.Cluster, r jobs.Run, s jobs.Shard, state jobs.RunState) {
	t.Helper()
	ctx := context.Background()
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: s.Worker, Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}}); err != nil {
		t.Fatalf("Complete(%s): %v", r.ID, err)
	}
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "pub", Lease: longLease}); err != nil {
		t.Fatalf("ClaimPublish(%s): %v", r.ID, err)
	}
	if err := l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: r.ID, Worker: "pub", State: state, Msg: ""}); err != nil {
		t.Fatalf("FinishPublish(%s): %v", r.ID, err)
	}
}

// testBackfill: a backfill records one child run per value; at most
// Parallel of them are claimable from the pool at once, the rest start in
// value order as runs end; a value given a new run (retry) keeps its place;
// BackfillOf finds a run's backfill; a child whose params have an open run
// stores nothing.
func testBackfill(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	values := []string{"2024-11-01", "2024-11-02", "2024-11-03"}
	var children []ledger.BackfillRun
	for _, v := range values {
		children = append(children, backfillChild("bfjob", v))
	}
	created := time.Now().UTC().Truncate(time.Millisecond)
	b := ledger.Backfill{ID: "bf-1", Job: "bfjob", Param: "date", From: values[0], To: values[2], Step: "1d",
		Parallel: 2, Priority: -1, Pool: "bf", CreatedAt: created}
	if err := l.CreateBackfill(ctx, b, children); err != nil {
		t.Fatalf("CreateBackfill: %v", err)
	}
	got, err := l.Backfill(ctx, "bf-1")
	if err != nil {
		t.Fatalf("Backfill: %v", err)
	}
	if got.Job != "bfjob" || got.Parallel != 2 || got.Priority != -1 || got.Pool != "bf" || got.From != values[0] || got.To != values[2] || got.Step != "1d" || got.Cancelled {
		t.Fatalf("Backfill = %+v, want the fields created", got)
	}
	if len(got.Dates) != 3 {
		t.Fatalf("Backfill dates = %+v, want 3", got.Dates)
	}
	for i, d := range got.Dates {
		if d.Value != values[i] || d.Run() != children[i].Run.ID || len(d.Runs) != 1 {
			t.Fatalf("date %d = %+v, want %s with run %s", i, d, values[i], children[i].Run.ID)
		}
		if st := mustRun(t, l, d.Run()).State; st != jobs.RunPending {
			t.Fatalf("child run %s is %s, want pending", d.Run(), st)
		}
	}
	if id, v, err := l.BackfillOf(ctx, children[1].Run.ID); err != nil || id != "bf-1" || v != values[1] {
		t.Fatalf("BackfillOf(child 2) = %q, %q, %v; want bf-1, %s", id, v, err, values[1])
	}
	other := create(t, l, "bfjob", "other", 1)
	_, _, err = l.BackfillOf(ctx, other.ID)
	wantErr(t, "BackfillOf(a run of no backfill)", err, ledger.ErrNotFound)

	// Parallel 2: the first two values start, the third waits.
	r1, s1 := claimNext(t, l, "bf", "w1", longLease)
	r2, s2 := claimNext(t, l, "bf", "w2", longLease)
	if ids := []string{r1.ID, r2.ID}; !slices.Contains(ids, children[0].Run.ID) || !slices.Contains(ids, children[1].Run.ID) {
		t.Fatalf("first claims went to runs %v, want the first two values' %s, %s", ids, children[0].Run.ID, children[1].Run.ID)
	}
	_, _, err = l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "bf", Worker: "w3", Lease: longLease})
	wantErr(t, "ClaimNext with 2 of 2 values in flight", err, ledger.ErrNoShard)
	if st := mustRun(t, l, children[2].Run.ID).State; st != jobs.RunPending {
		t.Fatalf("third value's run is %s, want pending (waiting)", st)
	}

	// One value ends: the third starts.
	first, firstShard := r1, s1
	if r1.ID != children[0].Run.ID {
		first, firstShard = r2, s2
	}
	finish(t, l, first, firstShard, jobs.RunSucceeded)
	r3, _ := claimNext(t, l, "bf", "w3", longLease)
	if r3.ID != children[2].Run.ID {
		t.Fatalf("after value 1 ended, ClaimNext gave run %s, want the third value's %s", r3.ID, children[2].Run.ID)
	}

	// Value 2 is cancelled, then given a new run (retry): it keeps its
	// place and is claimable, as one slot is free.
	if err := l.SetRunState(ctx, children[1].Run.ID, jobs.RunCancelled, "cancelled"); err != nil {
		t.Fatalf("SetRunState(cancelled): %v", err)
	}
	again := backfillChild("bfjob", values[1])
	if err := l.AddBackfillRuns(ctx, "bf-1", []ledger.BackfillRun{again}); err != nil {
		t.Fatalf("AddBackfillRuns: %v", err)
	}
	got, err = l.Backfill(ctx, "bf-1")
	if err != nil {
		t.Fatalf("Backfill: %v", err)
	}
	if len(got.Dates) != 3 || got.Dates[1].Value != values[1] || got.Dates[1].Run() != again.Run.ID ||
		!slices.Equal(got.Dates[1].Runs, []string{children[1].Run.ID, again.Run.ID}) {
		t.Fatalf("after AddBackfillRuns dates = %+v, want value %s with runs [%s %s]", got.Dates, values[1], children[1].Run.ID, again.Run.ID)
	}
	if r, _ := claimNext(t, l, "bf", "w4", longLease); r.ID != again.Run.ID {
		t.Fatalf("ClaimNext gave run %s, want the retried value's %s", r.ID, again.Run.ID)
	}
	_, _, err = l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "bf", Worker: "w5", Lease: longLease})
	wantErr(t, "ClaimNext with every shard leased", err, ledger.ErrNoShard)

	// Cancelling the backfill admits nothing more.
	if err := l.SetBackfill(ctx, "bf-1", 3, true); err != nil {
		t.Fatalf("SetBackfill: %v", err)
	}
	if got, err = l.Backfill(ctx, "bf-1"); err != nil || !got.Cancelled || got.Parallel != 3 {
		t.Fatalf("Backfill after SetBackfill = %+v, %v; want cancelled, parallel 3", got, err)
	}
	late := backfillChild("bfjob", "2024-11-04")
	if err := l.AddBackfillRuns(ctx, "bf-1", []ledger.BackfillRun{late}); err != nil {
		t.Fatalf("AddBackfillRuns: %v", err)
	}
	_, _, err = l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "bf", Worker: "w6", Lease: longLease})
	wantErr(t, "ClaimNext of a cancelled backfill's new run", err, ledger.ErrNoShard)

	// A second backfill attaches value 1's succeeded run and is the newest.
	b2 := b
	b2.ID, b2.CreatedAt, b2.Parallel, b2.Cancelled = "bf-2", created.Add(time.Second), 1, false
	attach := ledger.BackfillRun{Value: values[0], Run: children[0].Run, Attach: true}
	if err := l.CreateBackfill(ctx, b2, []ledger.BackfillRun{attach}); err != nil {
		t.Fatalf("CreateBackfill(attach): %v", err)
	}
	if id, _, err := l.BackfillOf(ctx, children[0].Run.ID); err != nil || id != "bf-2" {
		t.Fatalf("BackfillOf(attached run) = %q, %v; want the newest backfill bf-2", id, err)
	}
	list, err := l.Backfills(ctx, "bfjob", 0)
	if err != nil || len(list) != 2 || list[0].ID != "bf-2" || list[1].ID != "bf-1" || len(list[1].Dates) != 4 {
		t.Fatalf("Backfills(bfjob) = %+v, %v; want bf-2 then bf-1 (4 dates)", list, err)
	}
	if list, err := l.Backfills(ctx, "nojob", 0); err != nil || len(list) != 0 {
		t.Fatalf("Backfills(nojob) = %+v, %v; want none", list, err)
	}

	// A child whose params have an open run: nothing is stored.
	dup := backfillChild("bfjob", values[2]) // the third value's run is still open
	err = l.CreateBackfill(ctx, ledger.Backfill{ID: "bf-3", Job: "bfjob", Param: "date", From: values[2], To: values[2], Step: "1d", Parallel: 1, Pool: "bf"},
		[]ledger.BackfillRun{backfillChild("bfjob", "2024-12-01"), dup})
	var open *ledger.OpenRunError
	if !errors.As(err, &open) || open.RunID != children[2].Run.ID {
		t.Fatalf("CreateBackfill with an open child = %v, want an OpenRunError naming %s", err, children[2].Run.ID)
	}
	_, err = l.Backfill(ctx, "bf-3")
	wantErr(t, "Backfill of a refused backfill", err, ledger.ErrNotFound)
}

// testBackfillRetryRun: RetryBackfillRun reopens a value's failed run whose
// staged data is kept (its pending cleanup taken back, its committed shard
// kept as it was, its failed one pending) and has it wait for admission:
// with Parallel 1 and another value in flight it is not claimable until
// that value ends, then it is, before the later values. It refuses a run
// that is not the current run of a value (ErrNotFound) and one that is
// open (ErrRunOpen). A ledger that cannot reopen a failed run says
// ErrUnsupported and changes nothing.
func testBackfillRetryRun(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	values := []string{"2024-11-01", "2024-11-02", "2024-11-03"}
	var children []ledger.BackfillRun
	for _, v := range values {
		br := backfillChild("bfjob", v)
		br.Run.Shards, br.Shards = 2, []jobs.Shard{br.Shards[0], {RunID: br.Run.ID, Index: 1, Plan: br.Shards[0].Plan, EstRows: br.Shards[0].EstRows}}
		children = append(children, br)
	}
	b := ledger.Backfill{ID: "bf-r", Job: "bfjob", Param: "date", From: values[0], To: values[2], Step: "1d", Parallel: 1, Priority: -1, Pool: "bf"}
	if err := l.CreateBackfill(ctx, b, children); err != nil {
		t.Fatalf("CreateBackfill: %v", err)
	}
	// Value 1: shard 0 committed by w1, shard 1 out of attempts, the run
	// failed with its staged data kept; value 2 is admitted and claimed.
	first := children[0].Run.ID
	r, s := claimNext(t, l, "bf", "w1", longLease)
	if r.ID != first {
		t.Fatalf("first claim went to run %s, want %s", r.ID, first)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: first, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	s = claim(t, l, first, "w1", longLease)
	if err := l.Fail(ctx, ledger.FailParams{RunID: first, Shard: s.Index, Worker: "w1", Msg: "redis down", Retry: true, MaxAttempts: 1}); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if err := l.SetRunState(ctx, first, jobs.RunFailed, "shard 1 out of attempts"); err != nil {
		t.Fatalf("SetRunState(failed): %v", err)
	}
	kept := cleanupsSupported(t, l, mustRun(t, l, first), time.Hour)
	committed := mustShard(t, l, first, 0)
	if r, _ := claimNext(t, l, "bf", "w2", longLease); r.ID != children[1].Run.ID {
		t.Fatalf("claim after value 1 failed went to run %s, want value 2's %s", r.ID, children[1].Run.ID)
	}

	n, err := l.RetryBackfillRun(ctx, "bf-r", first)
	if !kept {
		wantErr(t, "RetryBackfillRun on a ledger that cannot reopen a failed run", err, ledger.ErrUnsupported)
		if got := mustRun(t, l, first); got.State != jobs.RunFailed {
			t.Fatalf("run after the refusal is %s, want failed", got.State)
		}
		return
	}
	if err != nil || n != 1 {
		t.Fatalf("RetryBackfillRun = %d, %v; want 1 shard moved", n, err)
	}
	if got := mustRun(t, l, first); got.State != jobs.RunRunning || got.Error != "" {
		t.Fatalf("reopened run is %s (%q), want running", got.State, got.Error)
	}
	if got := mustShard(t, l, first, 0); got.State != jobs.ShardCommitted || got.Worker != "w1" || !got.UpdatedAt.Equal(committed.UpdatedAt) {
		t.Fatalf("committed shard after the reopening = %+v, want it as it was (%+v)", got, committed)
	}
	if got := mustShard(t, l, first, 1); got.State != jobs.ShardPending || got.Attempts != 0 {
		t.Fatalf("failed shard after the reopening = %+v, want pending with attempts reset", got)
	}
	wantErr(t, "PendingCleanup of the reopened run", func() error { _, err := l.PendingCleanup(ctx, first); return err }(), ledger.ErrNotFound)
	// Parallel 1 and value 2 in flight: the reopened run waits.
	r2, s2 := claimNext(t, l, "bf", "w3", longLease)
	if r2.ID != children[1].Run.ID {
		t.Fatalf("claim with value 2 in flight went to run %s, want value 2's %s (the reopened run waits)", r2.ID, children[1].Run.ID)
	}
	noNewShard(t, l, "bf", "w4", "ClaimNext with 1 of 1 values in flight and value 1 reopened")
	wantErr(t, "RetryBackfillRun of an open run", func() error { _, err := l.RetryBackfillRun(ctx, "bf-r", first); return err }(), ledger.ErrRunOpen)
	wantErr(t, "RetryBackfillRun of a run of no value", func() error { _, err := l.RetryBackfillRun(ctx, "bf-r", "nope"); return err }(), ledger.ErrNotFound)
	wantErr(t, "RetryBackfillRun of another backfill", func() error { _, err := l.RetryBackfillRun(ctx, "bf-none", first); return err }(), ledger.ErrNotFound)

	// Value 2 ends: the reopened value 1 is admitted before value 3.
	s1 := mustShard(t, l, children[1].Run.ID, 0)
	if s1.State == jobs.ShardRunning {
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: s1.RunID, Shard: 0, Worker: s1.Worker, Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	finish(t, l, r2, s2, jobs.RunSucceeded)
	if r, s := claimNext(t, l, "bf", "w5", longLease); r.ID != first || s.Index != 1 {
		t.Fatalf("claim after value 2 ended went to run %s shard %d, want the reopened %s's shard 1", r.ID, s.Index, first)
	}
	noNewShard(t, l, "bf", "w6", "ClaimNext with the reopened value in flight")
}

// noNewShard fails unless pool has no shard for worker to claim but
// speculative second leases of shards in flight (the reopened run's
// committed shard took a few milliseconds: its running one is soon a
// straggler), which start no run.
func noNewShard(t *testing.T, l ledger.Cluster, pool, worker, what string) {
	t.Helper()
	for range 10 {
		r, s, err := l.ClaimNext(context.Background(), ledger.ClaimNextParams{Pool: pool, Worker: worker, Lease: longLease})
		if errors.Is(err, ledger.ErrNoShard) {
			return
		}
		if err != nil || !s.Speculative {
			t.Fatalf("%s: got run %s shard %+v, error %v; want no claimable shard", what, r.ID, s, err)
		}
	}
	t.Fatalf("%s: 10 speculative claims in a row", what)
}
