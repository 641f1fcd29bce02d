package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/profile"
	"github.com/precog-ml/precog/sinks"
)

// TestRunStatus: status reads the run's reject sample (bounded by
// runview.DefaultRejectSample), its stored checks' report, and names the
// live workers unable to run it; RunViews views every run given.
func TestRunStatus(t *testing.T) {
	d := dataset
	d.BadFraction = 0.005
	dir, spec := fixture(t, d)
	state := filepath.Join(dir, "state")
	ctx := context.Background()
	led, err := open.Open(ctx, open.Location{StateDir: state}, open.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	res, err := RunLocal(ctx, spec, LocalOptions{StateDir: state, Ledger: led, Sinks: []sinks.Sink{parquetSink(t, spec)}})
	if err != nil {
		t.Fatal(err)
	}
	run := res.Run
	if run.Counts.Rejected == 0 {
		t.Fatal("fixture rejected no rows")
	}
	shards, err := led.Shards(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	ws := []ledger.WorkerInfo{{ID: "w1", Unable: []ledger.Unable{{Run: run.ID, Reason: "no such model"}}}, {ID: "w2", Lost: true, Unable: []ledger.Unable{{Run: run.ID}}}}
	p := StatusParams{Ledger: led, StateDir: state, Run: run, Shards: shards, Workers: ws, Now: time.Now()}
	sr, err := RunStatus(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	st, rep := sr.Status, sr.Report
	if want := min(run.Counts.Rejected, 20); int64(len(st.RejectSample)) != want || st.Rejected != run.Counts.Rejected {
		t.Errorf("reject sample of %d rows of %d rejected, want %d", len(st.RejectSample), st.Rejected, want)
	}
	if rep != nil || st.Checks != nil {
		t.Errorf("report %v, checks %v of a run without checks", rep, st.Checks)
	}
	if len(st.CannotRun) != 1 || st.CannotRun[0] != "w1: no such model" {
		t.Errorf("cannot run %q, want the live worker w1's reason alone", st.CannotRun)
	}

	want := profile.Report{Passed: false, Against: "v1", AgainstRun: "r1", Checks: []profile.Check{{Name: "rows.min_ratio", Value: 0.5, Threshold: 0.9}}}
	b, _ := json.Marshal(want)
	if err := led.PutCheckReport(ctx, run.ID, b); err != nil {
		t.Fatal(err)
	}
	if sr, err = RunStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
	st, rep = sr.Status, sr.Report
	if rep == nil || rep.Against != "v1" || len(st.Checks) != 1 || st.Checks[0].Name != "rows.min_ratio" {
		t.Errorf("report %+v, checks %+v, want the stored report", rep, st.Checks)
	}
	var text bytes.Buffer
	if err := sr.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text.String(), "run ") || !strings.Contains(text.String(), run.ID) || !strings.Contains(text.String(), "cannot run") ||
		!strings.Contains(text.String(), "checks against version v1 (run r1):\n") || !strings.Contains(text.String(), "FAILED") || !strings.HasSuffix(text.String(), "checks failed\n") {
		t.Errorf("report text:\n%s", text.String())
	}

	views, err := RunViews(ctx, led, state, []jobs.Run{run, run}, time.Now())
	if err != nil || len(views) != 2 || views[1].ID != run.ID || views[1].Shards.Committed != len(shards) {
		t.Errorf("RunViews = %+v, %v; want the run twice, its shards committed", views, err)
	}
}

// TestCancelHeldLeavesOtherRuns: a run that is not held is not cancelled
// (precog cancel goes on with the ordinary cancel).
func TestCancelHeldLeavesOtherRuns(t *testing.T) {
	led, run := finishedRun(t)
	r, held, err := CancelHeld(context.Background(), HeldOptions{Ledger: led, RunID: run.ID})
	if held || err != nil || r.State != jobs.RunSucceeded {
		t.Errorf("CancelHeld of a succeeded run = %s, held %v, %v; want it untouched", r.State, held, err)
	}
	if _, held, err := CancelHeld(context.Background(), HeldOptions{Ledger: led, RunID: "nope"}); held || err != nil {
		t.Errorf("CancelHeld of an unknown run: held %v, %v", held, err)
	}
}

// TestResultSummary: the summary of a local run names the run, its
// resume, counts, a zero-row dataset, the rejects' directory and outputs.
func TestResultSummary(t *testing.T) {
	res := Result{Run: jobs.Run{ID: "r1", Version: "v1", ModelVersion: "m1", Shards: 4, Counts: jobs.Counts{RowsIn: 0}},
		Resumed: true, SkippedShards: 3, Duration: 2 * time.Second, Outputs: []string{"parquet: out"}}
	var b bytes.Buffer
	res.WriteSummary(&b)
	for _, want := range []string{"run r1 succeeded (version v1, model m1)\n", "resumed:   3 of 4 shards", "0 in, 0 out, 0 rejected",
		"the dataset has zero rows", "duration:  2s (0 rows/s)", "output:    parquet: out\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "rejects:") {
		t.Errorf("a run without rejects names their directory:\n%s", b.String())
	}
	// A start-up that took a tenth of the run or more (CUDA's, before a
	// short run) is named, with the rate after it.
	res = Result{Run: jobs.Run{ID: "r2"}, RowsThisProcess: 8_000_000, Duration: 2500 * time.Millisecond, Startup: 2 * time.Second}
	b.Reset()
	res.WriteSummary(&b)
	if want := "duration:  2.5s (3200000 rows/s; 16000000 rows/s after 2s of start-up)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, b.String())
	}
	res.Startup = 100 * time.Millisecond
	b.Reset()
	res.WriteSummary(&b)
	if strings.Contains(b.String(), "start-up") {
		t.Errorf("a start-up of 4%% of the run is named:\n%s", b.String())
	}
}

// TestRejectsShort: a listing of every reject says nothing; one cut by
// its limit says so; one cut by the ledger's bounded store says that the
// rest were counted, not stored.
func TestRejectsShort(t *testing.T) {
	if got := RejectsShort(5, 5, 5, 0); got != "" {
		t.Errorf("every reject listed: %q", got)
	}
	if got := RejectsShort(2, 5, 5, 2); got != "listed 2 of the run's 5 rejected rows (5 stored): --limit" {
		t.Errorf("cut by --limit: %q", got)
	}
	for _, limit := range []int{0, 200} {
		got := RejectsShort(100, 100, 900, limit)
		if !strings.HasPrefix(got, "listed 100 of the run's 900 rejected rows (100 stored): the ledger stores a bounded number") {
			t.Errorf("limit %d, cut by the store: %q", limit, got)
		}
	}
	if got := RejectsShort(50, 100, 900, 50); !strings.HasSuffix(got, ": --limit") {
		t.Errorf("cut by --limit below the store: %q", got)
	}
}
