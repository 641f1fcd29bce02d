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
