package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/runview"
)

// TestLocalBackfillCancelOneDateAndOtherJob: while a local backfill of 6
// dates runs, `precog cancel` of one of its dates mid-run and of its last,
// pending, date succeed and clean those dates' sinks while the other dates
// finish; a run of another job from the same state dir runs to success at
// the same time; a second process running the backfill's own job is
// refused (exit 75, naming the holder). Before, the cancel and the other job's run both exited 75
// ("state dir … is in use by another precog process").
func TestLocalBackfillCancelOneDateAndOtherJob(t *testing.T) {
	writeBackfillData(t)
	rdb := testservers.Redis(t)
	dir := workdir(t)
	dates := backfillData.Dates
	state := filepath.Join(dir, ".precog")
	spec := writeSpec(t, dir, "job.yaml", localBackfillSpec(rdb, rdb.Prefix+"d-{{.date}}"))

	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, "--state-dir", state, "backfill", spec, "--from", dates[0], "--to", dates[len(dates)-1],
		"--parallel", "1", "--shard-parallel", "1", "--no-progress")
	cmd.Dir = dir
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	running := func() bool {
		select {
		case err := <-done:
			done <- err
			return false
		default:
			return true
		}
	}

	// Read by `precog runs` while the backfill runs (dates in order, one
	// at a time): the running date with shards to go, the last date still
	// pending.
	dateRuns := func() (cur, last runview.Run) {
		var list []runview.Run
		r := precog(t, dir, "runs", "--json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil {
			t.Fatalf("runs --json while the backfill runs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		for _, r := range list {
			if r.Job == "scores" && r.State == string(jobs.RunRunning) && r.Shards.Pending > 0 {
				cur = r
			}
			if r.Job == "scores" && r.Params["date"] == dates[len(dates)-1] {
				last = r
			}
		}
		return cur, last
	}
	cur, last := runview.Run{}, runview.Run{}
	for deadline := time.Now().Add(2 * time.Minute); cur.ID == "" || cur.Shards.Committed == 0 || last.ID == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || !running() {
			t.Fatalf("no date of the backfill ran with a shard committed and more to go (backfill running: %v)\n%s", running(), errb.String())
		}
		cur, last = dateRuns()
	}
	if last.State != string(jobs.RunPending) {
		t.Fatalf("the last date is %s while the first ones run (--parallel 1)", last.State)
	}
	// The backfill has dates to go (the last one pending): it runs while
	// these commands do. The backfill's own job from a second process is
	// refused; another job runs from the same state dir.
	same := precog(t, dir, "run", spec, "--param", "date="+last.Params["date"], "--no-progress")
	if same.code != 75 || !strings.Contains(same.stderr, "job scores is running in another precog process (pid "+strconv.Itoa(cmd.Process.Pid)+")") {
		t.Errorf("a second process running the backfill's job: exit %d, want 75 naming pid %d\n%s", same.code, cmd.Process.Pid, same.stderr)
	}
	other := strings.NewReplacer("name: scores", "name: other", "out/scores/", "out/other/").Replace(rankerSpec)
	if o := precog(t, dir, "run", writeSpec(t, dir, "other.yaml", other), "--param", "date="+usersData.Dates[0], "--no-progress"); o.code != 0 {
		t.Errorf("run of another job while the backfill runs: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	cancelled := map[string]bool{}
	// The last date, still pending: the dates before it are not done.
	if c := precog(t, dir, "cancel", last.ID); c.code != 0 || !strings.Contains(c.stdout, "cancelled") {
		t.Fatalf("cancel of the pending last date %s: exit %d\n%s%s", last.ID, c.code, c.stdout, c.stderr)
	}
	cancelled[last.ID] = true
	// Cancel a date mid-run: the one running now, or, when it finished
	// meanwhile (a race this test does not control), the next one.
	for try := 0; len(cancelled) == 1; try++ {
		if try == len(dates)-2 {
			t.Fatalf("every running date finished before its cancel\n%s", errb.String())
		}
		if try > 0 {
			for cur, _ = dateRuns(); cur.ID == "" || cur.ID == last.ID; cur, _ = dateRuns() {
				if !running() {
					t.Fatalf("the backfill ended before a date could be cancelled mid-run\n%s", errb.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		c := precog(t, dir, "cancel", cur.ID)
		switch {
		case c.code == 0 && strings.Contains(c.stdout, "cancelled"):
			cancelled[cur.ID] = true
		case c.code == 0 || c.code == 75 || !strings.Contains(c.stderr, "finished") && !strings.Contains(c.stderr, "publishing"):
			// Only a date that finished or began its publish meanwhile
			// is a race to go on from.
			t.Fatalf("cancel %s while the backfill runs: exit %d\n%s%s", cur.ID, c.code, c.stdout, c.stderr)
		}
	}

	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("the backfill did not end\n%s", errb.String())
	}
	led, err := bolt.OpenIn(state)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	runs, err := led.Runs(context.Background(), "scores", 0)
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, r := range runs {
		switch {
		case cancelled[r.ID] && r.State != jobs.RunCancelled:
			t.Errorf("the cancelled date's run %s is %s (%s)", r.ID, r.State, r.Error)
		case !cancelled[r.ID] && r.State == jobs.RunSucceeded:
			succeeded++
		case !cancelled[r.ID]:
			t.Errorf("date run %s (%v) is %s (%s), want succeeded", r.ID, r.Params, r.State, r.Error)
		}
	}
	if succeeded != len(dates)-len(cancelled) {
		t.Errorf("%d dates succeeded, want %d\n%s", succeeded, len(dates)-len(cancelled), errb.String())
	}
	for _, r := range runs {
		if !cancelled[r.ID] {
			continue
		}
		if keys, _ := rdb.Client(t).Keys(context.Background(), rdb.Prefix+"d-"+r.Params["date"]+"*").Result(); len(keys) > 0 {
			t.Errorf("the cancelled date %s left %d Redis keys, e.g. %v", r.Params["date"], len(keys), keys[:min(3, len(keys))])
		}
	}
}
