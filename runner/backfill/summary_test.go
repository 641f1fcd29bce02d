package backfill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
)

// TestSummarize: each value's line says how it ended, and the range ends
// with the most urgent outcome: interrupted (context.Canceled) over
// failed over cancelled; nil when every value succeeded or was done
// before.
func TestSummarize(t *testing.T) {
	now := time.Now()
	ok := ValueResult{Started: true, Res: runner.Result{Run: jobs.Run{ID: "r1", Version: "v1", CreatedAt: now.Add(-2 * time.Second), UpdatedAt: now,
		State: jobs.RunSucceeded, Counts: jobs.Counts{RowsIn: 10, RowsOut: 9, Rejected: 1}}}}
	done := ValueResult{Started: true, Done: true, Res: runner.Result{AlreadyDone: true, Run: jobs.Run{ID: "r0", State: jobs.RunSucceeded}}}
	cancelled := ValueResult{Started: true, Err: errors.New("run r2 cancelled"), Res: runner.Result{Run: jobs.Run{ID: "r2", State: jobs.RunCancelled, Error: "cancelled by precog cancel"}}}
	failed := ValueResult{Started: true, Err: errors.New("boom")}
	interrupted := ValueResult{Started: true, Err: fmt.Errorf("shard 3: %w", runner.ErrInterrupted)}
	values := []string{"a", "b", "c", "d", "e", "f"}
	lines, err := Summarize("dt", values, []ValueResult{ok, done, cancelled, failed, interrupted, {}}, now)
	want := []ValueLine{
		{"dt=a", "succeeded", "run r1, version v1, 10 rows in, 9 out, 1 rejected, " + runnerDuration(ok, now)},
		{"dt=b", "already done", "run r0 (--force recomputes)"},
		{"dt=c", "cancelled", "run r2: cancelled by precog cancel"},
		{"dt=d", "FAILED", "boom"},
		{"dt=e", "interrupted (resumes on the same command)", ""},
		{"dt=f", "not started", ""},
	}
	if !slices.Equal(lines, want) {
		t.Errorf("lines:\n%q\nwant\n%q", lines, want)
	}
	if !errors.Is(err, context.Canceled) || err.Error() != "backfill interrupted (2 of 6 values not finished, 1 failed): context canceled" {
		t.Errorf("interrupted range: %v", err)
	}
	for _, tc := range []struct {
		results []ValueResult
		want    string
	}{
		{[]ValueResult{ok, done, cancelled, failed}, "backfill: 1 of 4 values failed: dt=d"},
		{[]ValueResult{ok, done, cancelled, ok}, "backfill: 1 of 4 values cancelled (precog retry BACKFILL runs them again): dt=c"},
		{[]ValueResult{ok, done, ok, ok}, ""},
	} {
		_, err := Summarize("dt", values[:4], tc.results, now)
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("Summarize = %v, want %q", err, tc.want)
		}
	}
}

func runnerDuration(r ValueResult, now time.Time) string {
	return (r.Res.Run.UpdatedAt.Sub(r.Res.Run.CreatedAt)).Round(time.Millisecond).String()
}
