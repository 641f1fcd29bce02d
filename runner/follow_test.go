package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/sinks"
)

// finishedRun runs the fixture job to its end on an embedded ledger it
// returns open, and the run.
func finishedRun(t *testing.T) (ledger.Store, jobs.Run) {
	t.Helper()
	dir, spec := fixture(t, dataset)
	state := filepath.Join(dir, "state")
	led, err := open.Open(context.Background(), open.Location{StateDir: state}, open.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: state, Ledger: led, Sinks: []sinks.Sink{parquetSink(t, spec)}})
	if err != nil {
		t.Fatal(err)
	}
	return led, res.Run
}

// TestWaitRunEndsAsTheRun: a succeeded run is its view and no error, with
// the progress of its last poll; a failed one is RunFailure's error
// naming its state and why.
func TestWaitRunEndsAsTheRun(t *testing.T) {
	led, run := finishedRun(t)
	var last Progress
	v, err := WaitRun(context.Background(), WaitParams{Ledger: led, RunID: run.ID, OnProgress: func(p Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != string(jobs.RunSucceeded) || v.RowsDone != 3000 || v.ID != run.ID {
		t.Errorf("view %+v, want %s succeeded with 3000 rows", v, run.ID)
	}
	if last.RunID != run.ID || last.RowsDone != 3000 || last.ShardsDone != last.ShardsTotal || last.ShardsTotal != 6 {
		t.Errorf("last progress %+v, want 3000 rows and 6 of 6 shards", last)
	}
	var b bytes.Buffer
	if err := v.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	if want := "run " + run.ID + " succeeded (version " + run.Version; !strings.HasPrefix(b.String(), want) || !strings.Contains(b.String(), "3000 in, 3000 out, 0 rejected") {
		t.Errorf("summary %q, want it to start %q and count 3000 rows", b.String(), want)
	}

	_, spec := fixture(t, dataset)
	failed := submit(t, led, spec)
	if err := led.SetRunState(context.Background(), failed.ID, jobs.RunFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitRun(context.Background(), WaitParams{Ledger: led, RunID: failed.ID}); err == nil || !strings.HasPrefix(err.Error(), "run "+failed.ID+" failed: boom") {
		t.Errorf("wait on a failed run: %v, want RunFailure's 'run %s failed: boom'", err, failed.ID)
	}
	if _, err := WaitRun(context.Background(), WaitParams{Ledger: led, RunID: "nope"}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an unknown run: %v, want ledger.ErrNotFound", err)
	}
}

// TestWatchRunFormats: a terminal run shows once per format; lines say
// its state and counts, JSON is the status object with an empty reject
// sample, and a run that did not succeed is an error naming its state.
func TestWatchRunFormats(t *testing.T) {
	led, run := finishedRun(t)
	ctx := context.Background()
	var lines bytes.Buffer
	if err := WatchRun(ctx, WatchParams{Ledger: led, RunID: run.ID, Out: &lines, Format: WatchLines, Every: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(lines.String()), "\n"); len(got) != 1 || !strings.Contains(got[0], " succeeded rows 3000/3000 shards committed=6 running=0") {
		t.Errorf("lines %q, want one line of the succeeded run", got)
	}
	var js bytes.Buffer
	if err := WatchRun(ctx, WatchParams{Ledger: led, RunID: run.ID, Out: &js, Format: WatchJSON}); err != nil {
		t.Fatal(err)
	}
	var st runview.Status
	if err := json.Unmarshal(js.Bytes(), &st); err != nil || st.ID != run.ID || st.RejectSample == nil {
		t.Errorf("json %q (%v), want one status object of %s with a reject_sample", js.String(), err, run.ID)
	}

	// A run the test fails (it is open: a planned run nothing executes).
	_, spec := fixture(t, dataset)
	open := submit(t, led, spec)
	if err := led.SetRunState(ctx, open.ID, jobs.RunFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	var failed bytes.Buffer
	err := WatchRun(ctx, WatchParams{Ledger: led, RunID: open.ID, Out: &failed, Format: WatchLines})
	if err == nil || err.Error() != "run "+open.ID+" failed: boom" {
		t.Errorf("watch of a failed run: %v, want 'run %s failed: boom'", err, open.ID)
	}
	if !strings.Contains(failed.String(), ` failed rows 0/3000`) || !strings.Contains(failed.String(), `error="boom"`) {
		t.Errorf("line %q, want the failed state and its error", failed.String())
	}
}

// TestChangedIgnoresTheClock: a view whose duration and rate alone moved
// is not a change; one whose rows moved is.
func TestChangedIgnoresTheClock(t *testing.T) {
	last := ""
	v := runview.Run{ID: "r", State: "running", RowsDone: 10, DurationS: 1, RowsPerS: 10}
	if !changed(&last, v) {
		t.Fatal("the first view is a change")
	}
	v.DurationS, v.RowsPerS = 2, 5
	if changed(&last, v) {
		t.Error("a view whose clock fields alone moved is a change")
	}
	v.RowsDone = 20
	if !changed(&last, v) {
		t.Error("a view whose rows moved is not a change")
	}
}

// TestWatchLine: the line names the state, rows, shards by state, the
// rate given (else the run's average), the ETA and the error.
func TestWatchLine(t *testing.T) {
	v := runview.Run{State: "running", RowsDone: 500, RowsTotal: 1500, RowsPerS: 7, Error: "x \"y\"",
		Shards: runview.ShardCounts{Committed: 1, Running: 2, Pending: 3, Failed: 4, Cancelled: 5}}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	want := `2026-11-27T10:00:00Z running rows 500/1500 shards committed=1 running=2 pending=3 failed=4 cancelled=5 rows/s=100 eta=10s error="x \"y\""`
	if got := WatchLine(v, 100, now); got != want {
		t.Errorf("WatchLine =\n%s\nwant\n%s", got, want)
	}
	if got := WatchLine(v, 0, now); !strings.Contains(got, "rows/s=7 ") {
		t.Errorf("WatchLine at rate 0 = %s, want the run's average rate 7", got)
	}
}
