package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

func listWorkers(t *testing.T, w ledger.Workers, pool string) []ledger.WorkerInfo {
	t.Helper()
	ws, err := w.ListWorkers(context.Background(), pool)
	if err != nil {
		t.Fatalf("ListWorkers(%q): %v", pool, err)
	}
	return ws
}

func workerIDs(ws []ledger.WorkerInfo) string {
	var ids []string
	for _, w := range ws {
		ids = append(ids, fmt.Sprintf("%s@%s lost=%v", w.ID, w.Pool, w.Lost))
	}
	return strings.Join(ids, ", ")
}

// testWorkers: a heartbeat registers a worker with what it reports; the
// list filters by pool and orders by pool then id; a worker silent for its
// lease is lost (by the ledger's clock) until it beats again, keeping its
// start time; a clean stop removes it.
func testWorkers(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	gpu := ledger.WorkerInfo{ID: "host-1", Pool: "gpu", Devices: []string{"cuda:0", "cuda:1"}, Version: "v1.2.3",
		ModelCache: "recs@abc123", Lease: shortLease, Current: []ledger.ShardRef{{Run: "r1", Shard: 3, Device: "cuda:0"}}}
	cpu := ledger.WorkerInfo{ID: "host-2", Devices: []string{"cpu"}, Version: "v1.2.3", Lease: longLease}
	for _, wi := range []ledger.WorkerInfo{gpu, cpu} {
		if err := l.HeartbeatWorker(ctx, wi); err != nil {
			t.Fatalf("HeartbeatWorker(%s): %v", wi.ID, err)
		}
	}
	all := listWorkers(t, l, "")
	if got := workerIDs(all); len(all) != 2 || !strings.HasPrefix(got, "host-2@default lost=false, host-1@gpu") {
		t.Fatalf("ListWorkers = %s, want host-2 (default) then host-1 (gpu)", got)
	}
	g := all[1]
	if !slices.Equal(g.Devices, gpu.Devices) || g.Version != gpu.Version || g.ModelCache != gpu.ModelCache || g.Lease != shortLease ||
		!slices.Equal(g.Current, gpu.Current) || g.StartedAt.IsZero() || g.HeartbeatAt.Before(g.StartedAt) {
		t.Fatalf("worker read back as %+v, want what it reported (%+v) with its times", g, gpu)
	}
	if got := workerIDs(listWorkers(t, l, "gpu")); !strings.HasPrefix(got, "host-1@gpu") || strings.Contains(got, "host-2") {
		t.Fatalf("ListWorkers(gpu) = %s, want host-1 only", got)
	}

	// host-1 stops heartbeating: lost after one lease; host-2 is not.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ws := listWorkers(t, l, "")
		if ws[1].Lost {
			if ws[0].Lost || ws[1].HeartbeatAge <= shortLease {
				t.Fatalf("after host-1's lease: %s, age %s; want host-1 lost (age > %s), host-2 alive", workerIDs(ws), ws[1].HeartbeatAge, shortLease)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host-1 not lost 10s after its last heartbeat (lease %s): %s", shortLease, workerIDs(ws))
		}
		time.Sleep(shortLease / 2)
	}
	// It beats again (now holding nothing, with a long lease, so that a
	// slow list after the beat still finds it alive): alive, same start.
	gpu.Current, gpu.Lease = nil, longLease
	if err := l.HeartbeatWorker(ctx, gpu); err != nil {
		t.Fatalf("HeartbeatWorker again: %v", err)
	}
	again := listWorkers(t, l, "gpu")
	if len(again) != 1 || again[0].Lost || len(again[0].Current) != 0 || !again[0].StartedAt.Equal(g.StartedAt) {
		t.Fatalf("after a new heartbeat: %+v, want alive, holding nothing, started at %s", again, g.StartedAt)
	}
	if err := l.RemoveWorker(ctx, "host-1"); err != nil {
		t.Fatalf("RemoveWorker: %v", err)
	}
	if err := l.RemoveWorker(ctx, "never-seen"); err != nil {
		t.Fatalf("RemoveWorker of an unknown worker: %v", err)
	}
	if got := workerIDs(listWorkers(t, l, "")); !strings.HasPrefix(got, "host-2@default") || strings.Contains(got, "host-1") {
		t.Fatalf("after RemoveWorker(host-1): %s, want host-2 only", got)
	}
}

func rejectsPage(t *testing.T, r ledger.Rejects, runID string, offset, limit int) ledger.RejectPage {
	t.Helper()
	p, err := r.Rejects(context.Background(), runID, offset, limit)
	if err != nil {
		t.Fatalf("Rejects(%s, %d, %d): %v", runID, offset, limit, err)
	}
	return p
}

// testRejectsStore: Complete stores every reject it is given (not only the
// sample), by position, fenced by the lease, replacing an earlier
// attempt's; Rejects pages through committed shards' rows in order.
func testRejectsStore(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 3)
	rows := make([]int, 30)
	for i := range rows {
		rows[i] = 29 - i // out of order: stored by position
	}
	s0 := claim(t, l, r.ID, "w1", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s0.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 100, Rejected: 30}, Sample: rejectsAt(0, "NaN", rows...)}); err != nil {
		t.Fatalf("Complete(0): %v", err)
	}
	s1 := claim(t, l, r.ID, "w1", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s1.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 10, Rejected: 2}, Sample: rejectsAt(1, "null key", 4, 2)}); err != nil {
		t.Fatalf("Complete(1): %v", err)
	}
	// Shard 2: a late holder's rejects are refused with its commit.
	claim(t, l, r.ID, "slow", shortLease)
	time.Sleep(3 * shortLease)
	if s := claim(t, l, r.ID, "w2", longLease); s.Index != 2 {
		t.Fatalf("re-claim = shard %d, want 2", s.Index)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 2, Worker: "w2", Counts: jobs.Counts{RowsIn: 10}}); err != nil {
		t.Fatalf("Complete(2): %v", err)
	}
	wantErr(t, "late Complete with rejects", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 2, Worker: "slow", Counts: jobs.Counts{RowsIn: 10, Rejected: 1}, Sample: rejectsAt(2, "late", 1)}), ledger.ErrLeaseLost)

	var want []string
	for i := range 30 {
		want = append(want, fmt.Sprintf("0|part-0.parquet row %d|NaN", i))
	}
	want = append(want, "1|part-1.parquet row 2|null key", "1|part-1.parquet row 4|null key")
	p := rejectsPage(t, l, r.ID, 0, 0)
	if got := strings.Join(sampleLines(p.Rows), "\n"); got != strings.Join(want, "\n") || p.Stored != 32 || p.Cap <= 0 {
		t.Fatalf("Rejects(all) = stored %d cap %d\n%s\nwant stored 32 of\n%s", p.Stored, p.Cap, got, strings.Join(want, "\n"))
	}
	if p.Rows[0].Key != "k0" {
		t.Fatalf("first reject's key = %q, want k0", p.Rows[0].Key)
	}
	// Pages: across the shard boundary, and past the end.
	p = rejectsPage(t, l, r.ID, 28, 3)
	if got := strings.Join(sampleLines(p.Rows), "\n"); got != strings.Join(want[28:31], "\n") || p.Stored != 32 {
		t.Fatalf("Rejects(offset 28, limit 3) =\n%s\nwant\n%s", got, strings.Join(want[28:31], "\n"))
	}
	if p = rejectsPage(t, l, r.ID, 40, 10); len(p.Rows) != 0 || p.Stored != 32 {
		t.Fatalf("Rejects past the end = %d rows, stored %d; want none of 32", len(p.Rows), p.Stored)
	}

	// A reopened shard's rejects are hidden; its next commit replaces them.
	if err := l.Reopen(ctx, r.ID, []int{0}, "lost by a sink"); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	if p = rejectsPage(t, l, r.ID, 0, 0); p.Stored != 2 || len(p.Rows) != 2 {
		t.Fatalf("after Reopen(0): %d rows, stored %d; want shard 1's 2", len(p.Rows), p.Stored)
	}
	s := claim(t, l, r.ID, "w3", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w3", Counts: jobs.Counts{RowsIn: 100, Rejected: 1}, Sample: rejectsAt(0, "again", 7)}); err != nil {
		t.Fatalf("Complete(0) again: %v", err)
	}
	p = rejectsPage(t, l, r.ID, 0, 0)
	if got := strings.Join(sampleLines(p.Rows), "\n"); got != strings.Join(append([]string{"0|part-0.parquet row 7|again"}, want[30:]...), "\n") {
		t.Fatalf("after the recommit: %s", got)
	}

	if p = rejectsPage(t, l, create(t, l, "recs", "clean", 1).ID, 0, 10); len(p.Rows) != 0 || p.Stored != 0 {
		t.Fatalf("Rejects of a clean run = %+v, want none", p)
	}
	_, err := l.Rejects(ctx, "no-such-run", 0, 10)
	wantErr(t, "Rejects of a missing run", err, ledger.ErrNotFound)
}

// testRejectsCap: the ledger stores at most its cap (by default
// ledger.DefaultRejectsPerRun) of one run's rejects; the shards committed
// first fill it; the run's counts stay exact.
func testRejectsCap(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 2)
	limit := rejectsPage(t, l, r.ID, 0, 1).Cap
	if limit != ledger.DefaultRejectsPerRun {
		t.Fatalf("cap = %d, want the default %d", limit, ledger.DefaultRejectsPerRun)
	}
	each := limit*3/5 + 1
	rows := make([]int, each)
	for i := range rows {
		rows[i] = i
	}
	for range 2 {
		s := claim(t, l, r.ID, "w1", longLease)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: int64(2 * each), Rejected: int64(each)}, Sample: rejectsAt(s.Index, "NaN", rows...)}); err != nil {
			t.Fatalf("Complete(%d): %v", s.Index, err)
		}
	}
	p := rejectsPage(t, l, r.ID, limit-2, 5)
	if p.Stored != int64(limit) || len(p.Rows) != 2 {
		t.Fatalf("past the cap: stored %d, last page %d rows; want %d stored, 2 rows", p.Stored, len(p.Rows), limit)
	}
	if last := p.Rows[1]; last.Shard != 1 || last.Position != fmt.Sprintf("part-1.parquet row %d", limit-each-1) {
		t.Fatalf("last stored reject = %+v, want shard 1's row %d (the first rows by position)", last, limit-each-1)
	}
	if c := mustRun(t, l, r.ID).Counts; c.Rejected != int64(2*each) {
		t.Fatalf("run rejected = %d, want %d (counted past the cap)", c.Rejected, 2*each)
	}
}

// testWorkerUnable: the runs a worker reports it cannot execute are listed
// with it, and a later heartbeat without them clears them.
func testWorkerUnable(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	since := time.Date(2026, 11, 3, 4, 5, 6, 0, time.UTC)
	info := ledger.WorkerInfo{ID: "host-1", Devices: []string{"cpu"}, Lease: longLease,
		Unable: []ledger.Unable{{Run: "r1", Job: "recs", Reason: "spec: ${DATABASE_URL} is not set", Since: since}}}
	if err := l.HeartbeatWorker(ctx, info); err != nil {
		t.Fatalf("HeartbeatWorker: %v", err)
	}
	ws := listWorkers(t, l, "")
	if len(ws) != 1 || len(ws[0].Unable) != 1 || ws[0].Unable[0] != info.Unable[0] {
		t.Fatalf("ListWorkers = %+v, want host-1 unable for %+v", ws, info.Unable)
	}
	info.Unable = nil
	if err := l.HeartbeatWorker(ctx, info); err != nil {
		t.Fatalf("HeartbeatWorker: %v", err)
	}
	if ws := listWorkers(t, l, ""); len(ws) != 1 || len(ws[0].Unable) != 0 {
		t.Fatalf("ListWorkers after a heartbeat without unable runs = %+v, want none", ws)
	}
}
