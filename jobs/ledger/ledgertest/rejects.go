package ledgertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// rejectsAt makes one reject per row of part-{shard}.parquet, in the given
// order, with reason.
func rejectsAt(shard int, reason string, rows ...int) []jobs.Reject {
	out := make([]jobs.Reject, len(rows))
	for i, row := range rows {
		out[i] = jobs.Reject{Key: fmt.Sprintf("k%d", row), Position: fmt.Sprintf("part-%d.parquet row %d", shard, row), Reason: reason}
	}
	return out
}

// sampleLines writes a sample as "shard|position|reason" lines to compare.
func sampleLines(rs []jobs.Reject) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d|%s|%s", r.Shard, r.Position, r.Reason)
	}
	return out
}

func wantSample(t *testing.T, l ledger.Ledger, runID string, limit int, want ...string) []jobs.Reject {
	t.Helper()
	got, err := l.RejectSample(context.Background(), runID, limit)
	if err != nil {
		t.Fatalf("RejectSample(%s, %d): %v", runID, limit, err)
	}
	if g := sampleLines(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("RejectSample(%s, %d) =\n%s\nwant\n%s", runID, limit, strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
	return got
}

// testRejectSample: Complete stores a capped, bounded sample of the
// attempt's rejects with the commit, fenced by the lease; a later attempt's
// Complete replaces it; RejectSample reads committed shards' samples by
// shard then position, with a limit.
func testRejectSample(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "", 3)

	// Shard 0: more rejects than the cap, one with a huge key that is not
	// UTF-8 and holds a NUL, and a wrong shard number the ledger overrides.
	s0 := claim(t, l, r.ID, "w1", longLease)
	many := rejectsAt(0, "null feature f1", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29)
	many[0].Key = "\xff\x00" + strings.Repeat("k", 1<<20)
	many[3].Shard = 99
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s0.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 100, RowsOut: 70, Rejected: 30}, Sample: many}); err != nil {
		t.Fatalf("Complete(0) with rejects: %v", err)
	}
	// Shard 1: rejects given out of order come back by position.
	s1 := claim(t, l, r.ID, "w1", longLease)
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s1.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 20, RowsOut: 18, Rejected: 2}, Sample: rejectsAt(1, "NaN output", 10, 9)}); err != nil {
		t.Fatalf("Complete(1) with rejects: %v", err)
	}
	// Shard 2: a holder whose lease was taken over completes late; its
	// sample is refused with the commit and the winner's stays.
	claim(t, l, r.ID, "slow", shortLease)
	time.Sleep(3 * shortLease)
	if s := claim(t, l, r.ID, "w2", longLease); s.Index != 2 {
		t.Fatalf("re-claim = shard %d, want the expired shard 2", s.Index)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 2, Worker: "w2", Counts: jobs.Counts{RowsIn: 10, RowsOut: 9, Rejected: 1}, Sample: rejectsAt(2, "NaN output", 5)}); err != nil {
		t.Fatalf("Complete(2) by the new holder: %v", err)
	}
	wantErr(t, "late Complete with rejects", l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: 2, Worker: "slow", Counts: jobs.Counts{RowsIn: 10, Rejected: 1}, Sample: rejectsAt(2, "late", 1)}), ledger.ErrLeaseLost)

	var want []string
	for row := range jobs.RejectSampleCap {
		want = append(want, fmt.Sprintf("0|part-0.parquet row %d|null feature f1", row))
	}
	want = append(want, "1|part-1.parquet row 9|NaN output", "1|part-1.parquet row 10|NaN output", "2|part-2.parquet row 5|NaN output")
	got := wantSample(t, l, r.ID, 0, want...)
	if k := got[0].Key; len(k) > jobs.RejectFieldMax || !utf8.ValidString(k) || strings.ContainsRune(k, 0) || !strings.HasPrefix(k, `"\xff\x00kkk`) {
		t.Fatalf("huge invalid key stored as %d bytes %.40q, want at most %d bytes of escaped UTF-8", len(k), k, jobs.RejectFieldMax)
	}
	if got[1].Key != "k1" {
		t.Fatalf("sample key = %q, want k1", got[1].Key)
	}
	wantSample(t, l, r.ID, 5, want[:5]...)
	if c := mustRun(t, l, r.ID).Counts; c != (jobs.Counts{RowsIn: 130, RowsOut: 97, Rejected: 33}) {
		t.Fatalf("run counts = %+v, want the three commits' sums", c)
	}

	// Reopened shards hide their sample until a later attempt's Complete
	// replaces it (an attempt without rejects clears it).
	if err := l.Reopen(ctx, r.ID, []int{0, 1}, "lost by a sink"); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	wantSample(t, l, r.ID, 0, "2|part-2.parquet row 5|NaN output")
	for _, rs := range [][]jobs.Reject{nil, rejectsAt(1, "replaced", 3)} {
		s := claim(t, l, r.ID, "w3", longLease)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w3", Counts: jobs.Counts{RowsIn: 1, Rejected: int64(len(rs))}, Sample: rs}); err != nil {
			t.Fatalf("Complete(%d) after Reopen: %v", s.Index, err)
		}
	}
	wantSample(t, l, r.ID, 0, "1|part-1.parquet row 3|replaced", "2|part-2.parquet row 5|NaN output")

	clean := create(t, l, "recs", "clean", 1)
	wantSample(t, l, clean.ID, 10)
	_, err := l.RejectSample(ctx, "no-such-run", 10)
	wantErr(t, "RejectSample of a missing run", err, ledger.ErrNotFound)
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
