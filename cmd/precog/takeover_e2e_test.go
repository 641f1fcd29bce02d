package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks/parquet"
)

// publisherOf is the worker holding run id's publish lease ("" when none).
func (c *e2eCluster) publisherOf(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var p string
	_ = conn.QueryRow(ctx, `SELECT coalesce(publisher, '') FROM precog_runs WHERE id = $1`, id).Scan(&p)
	return p
}

// processStopped says whether process pid is stopped (state T in
// /proc/PID/stat), as a SIGSTOP leaves it.
func processStopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestClusterFrozenPublisherTakenOver: two workers with a 3s lease into
// Redis, Postgres and a fixed Parquet path. The worker publishing run B is
// frozen (SIGSTOP) right after it staged, holding every sink's writer
// lock: the other worker takes the publish and the sinks' targets over
// once the leases lapse, and B publishes within 2 leases of the freeze;
// the next run C publishes too, as soon as its shards are done. Thawed,
// the stale holder is fenced: it notices its Parquet lease was lost and
// changes nothing (the published data stays exactly C's, file for file).
// On the old code the Parquet target's flock outlived the holder's lease:
// B never published.
func TestClusterFrozenPublisherTakenOver(t *testing.T) {
	const lease = 3 * time.Second
	j := e2eQuick
	c := newE2ECluster(t, j, testservers.Postgres(t).DSN, testservers.Postgres(t).DSN, testservers.Redis(t))
	want := c.reference(j)
	// w1 stops itself (SIGSTOP) right after its first publish staged every
	// sink (runner.EnvStopAfterStage): the freeze lands between stage and
	// cutover whatever the machine's speed. w2 publishes the runs w1 does
	// not, until one is w1's.
	holder := c.start([]string{"env", runner.EnvStopAfterStage + "=1"}, "worker", "--db", c.dsn, "--lease", "3s", "--drain-timeout", "5s")
	ws := []*workerProc{holder, c.worker("--lease", "3s")}
	var id, version string
	var frozen time.Time
	for try := 0; ; try++ {
		id = c.submit()
		version = c.run(id).Version
		c.waitFor("run "+id+" to end or w1 to stop itself after staging it", 2*time.Minute, func() bool {
			return processStopped(holder.cmd.Process.Pid) || c.run(id).State.Terminal()
		})
		if processStopped(holder.cmd.Process.Pid) {
			frozen = time.Now()
			break
		}
		if try == 19 {
			t.Fatalf("w1 published none of 20 runs")
		}
	}
	if pub := c.publisherOf(id); !strings.HasPrefix(pub, holder.workerIDPrefix()) {
		t.Fatalf("w1 stopped after staging, but run %s's publisher is %q", id, pub)
	}
	if rv, pv, qv := c.storeVersions(); rv == version || pv == version || qv == version {
		t.Fatalf("w1 stopped after staging run %s, yet a store is on it already (redis %s, parquet %s, postgres %s)", id, rv, pv, qv)
	}
	t.Logf("froze %s publishing run %s after it staged", holder.name, id)
	mark := len(holder.log.String())

	r := c.waitTerminal(id, time.Minute)
	took := r.UpdatedAt.Sub(frozen)
	t.Logf("run %s %s %s after the publisher froze (lease %s)", id, r.State, took.Round(time.Millisecond), lease)
	if r.State != jobs.RunSucceeded {
		t.Fatalf("run %s: %s (%s)", id, r.State, r.Error)
	}
	if took > 2*lease {
		t.Errorf("run %s published %s after its publisher froze: more than 2 leases (%s)", id, took.Round(time.Millisecond), 2*lease)
	}
	next := c.submit()
	rn := c.waitTerminal(next, time.Minute)
	if rn.State != jobs.RunSucceeded {
		t.Fatalf("next run %s: %s (%s)", next, rn.State, rn.Error)
	}
	var lastCommit time.Time
	for _, s := range c.shards(next) {
		if s.UpdatedAt.After(lastCommit) {
			lastCommit = s.UpdatedAt
		}
	}
	if wait := rn.UpdatedAt.Sub(lastCommit); wait > 2*lease {
		t.Errorf("next run %s published %s after its last shard: more than 2 leases", next, wait.Round(time.Millisecond))
	}
	published := c.checkOutputs(j, want)
	c.storesOn(rn.Version)

	// The stale holder wakes: it finds its Parquet lease lost, and drains.
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the thawed publisher to find its parquet lease lost", 30*time.Second, func() bool {
		return strings.Contains(holder.log.String()[mark:], "parquet target lease lost")
	})
	stopWorkers(t, ws...)
	after := c.checkOutputs(j, want)
	if !maps.Equal(after.parquetFiles, published.parquetFiles) {
		t.Errorf("the published parquet files changed after the stale publisher woke:\nbefore %v\nafter  %v", published.parquetFiles, after.parquetFiles)
	}
	c.storesOn(rn.Version)
	if late := holder.log.String()[mark:]; strings.Contains(late, `msg=published`) {
		t.Errorf("the thawed publisher published a sink:\n%s", late)
	}
	if m, err := parquet.ReadMarker(filepath.Join(c.dir, "out", "scores", ".date="+e2eDate+".precog.versions", r.Version)); err != nil || m.Version != r.Version {
		ents, _ := os.ReadDir(filepath.Join(c.dir, "out", "scores", ".date="+e2eDate+".precog.versions"))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("run %s's version is not retained beside the target: %+v (%v); retained: %v", id, m, err, names)
	}
	if r := c.run(id); r.State != jobs.RunSucceeded || r.Error != "" {
		t.Errorf("run %s after the stale publisher woke: %s %q", id, r.State, r.Error)
	}
}
