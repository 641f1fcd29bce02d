package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// TestSchedulerEndToEnd: two real `precog scheduler` replicas and a real
// worker on a minute schedule. The leader fires the first tick; it is then
// killed with SIGKILL, the standby takes over within the lease and fires the
// next tick: exactly one run per tick, none lost, each run succeeds.
func TestSchedulerEndToEnd(t *testing.T) {
	pg := testservers.Postgres(t)
	c := newE2ECluster(t, e2eJob{model: "ranker", rowsPerShard: 1000, batch: 256}, pg.DSN, "", nil)
	jobsDir := filepath.Join(c.dir, "jobs")
	body := `name: minutely
schedule: "* * * * *"
timezone: Europe/London
concurrency: allow
source:
  parquet: { path: "` + filepath.Join(c.dir, "data/users/dt=2026-11-01") + `" }
  key: user_id
  rows_per_shard: 1000
model:
  path: ` + filepath.Join(c.dir, "models/ranker.onnx") + `
  inputs:
    features: { columns: [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] }
  outputs: { score: score }
  batch_size: 256
sinks:
  parquet: { path: "` + filepath.Join(c.dir, "out/minutely/{{.date}}") + `" }
`
	writeSpec(t, jobsDir, "minutely.yaml", body)
	a := c.start(nil, "scheduler", "--jobs", jobsDir, "--db", pg.DSN, "--lease", "3s")
	b := c.start(nil, "scheduler", "--jobs", jobsDir, "--db", pg.DSN, "--lease", "3s")
	c.worker()
	ctx := context.Background()
	runs := func() []jobs.Run {
		rs, err := c.led.Runs(ctx, "minutely", 0)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	c.waitFor("the first tick's run", 80*time.Second, func() bool { return len(runs()) >= 1 })
	leader, standby := a, b
	if !strings.Contains(a.log.String(), "leader=true") {
		leader, standby = b, a
	}
	if !strings.Contains(leader.log.String(), "leader=true") {
		t.Fatalf("no replica says it leads\n%s", c.logTails(20))
	}
	_ = leader.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.done
	c.waitFor("the next tick's run, fired by the standby", 90*time.Second, func() bool { return len(runs()) >= 2 })
	if !strings.Contains(standby.log.String(), "leader=true") {
		t.Errorf("the standby did not log taking over\n%s", c.logTails(20))
	}
	c.waitFor("every fired run to finish", time.Minute, func() bool {
		for _, r := range runs() {
			if !r.State.Terminal() {
				return false
			}
		}
		return true
	})
	seen := map[string]bool{}
	for _, r := range runs() {
		at := r.Params["scheduled_for"]
		if seen[at] {
			t.Errorf("tick %s fired twice", at)
		}
		seen[at] = true
		if r.State != jobs.RunSucceeded {
			t.Errorf("run %s for %s: %s (%s)", r.ID, at, r.State, r.Error)
		}
		tick, err := time.Parse(time.RFC3339, at)
		if err != nil || tick.Second() != 0 {
			t.Errorf("run %s: scheduled_for %q is not a minute tick", r.ID, at)
		}
	}
	// Consecutive minutes: no tick lost in the failover.
	var ticks []time.Time
	for at := range seen {
		tt, _ := time.Parse(time.RFC3339, at)
		ticks = append(ticks, tt)
	}
	if len(ticks) >= 2 {
		first, last := ticks[0], ticks[0]
		for _, tt := range ticks {
			if tt.Before(first) {
				first = tt
			}
			if tt.After(last) {
				last = tt
			}
		}
		if want := int(last.Sub(first)/time.Minute) + 1; want != len(ticks) {
			t.Errorf("%d runs between %s and %s, want one per minute (%d): a tick was lost", len(ticks), first.Format(time.TimeOnly), last.Format(time.TimeOnly), want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dir, "out", "minutely")); err != nil {
		t.Errorf("no output published: %v", err)
	}
}
