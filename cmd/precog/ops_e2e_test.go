package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// workersJSON runs `precog workers --json` and decodes it.
func (c *e2eCluster) workersJSON(args ...string) []workerJSON {
	c.t.Helper()
	r := c.precog(append([]string{"workers", "--json", "--db", c.dsn}, args...)...)
	if r.code != 0 {
		c.t.Fatalf("precog workers --json: exit %d: %s", r.code, r.stderr)
	}
	var ws []workerJSON
	if err := json.Unmarshal([]byte(r.stdout), &ws); err != nil {
		c.t.Fatalf("precog workers --json: %v\n%s", err, r.stdout)
	}
	return ws
}

// workerNamed finds the worker process w in a workers list.
func workerNamed(ws []workerJSON, w *workerProc) (workerJSON, bool) {
	id := strings.TrimSuffix(w.workerIDPrefix(), "/")
	for _, x := range ws {
		if x.ID == id {
			return x, true
		}
	}
	return workerJSON{}, false
}

// TestClusterWorkersList: two `precog worker` processes register in the
// ledger and `precog workers --json` lists both, up, with pool, devices
// and version; after a kill -9 one is marked lost once its lease passed
// (and its held shards as expiring in the text view), the other stays up;
// a clean stop (SIGTERM) removes a worker from the list. submit warns on
// stderr when no worker of the pool heartbeated within a lease.
func TestClusterWorkersList(t *testing.T) {
	c := newE2ECluster(t, e2eJob{model: "heavy", rowsPerShard: 100, batch: 4}, testservers.Postgres(t).DSN, "", nil)
	r := c.precog("submit", "--db", c.dsn, c.spec, "--param", "date="+e2eDate)
	if r.code != 0 || !strings.Contains(r.stderr, `warning: no worker of pool "default" has heartbeated`) {
		t.Fatalf("submit to a pool without workers: exit %d, stderr lacks the warning:\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	w1, w2 := c.worker(), c.worker()
	var ws []workerJSON
	c.waitFor("precog workers to list both workers", time.Minute, func() bool {
		ws = c.workersJSON()
		_, ok1 := workerNamed(ws, w1)
		_, ok2 := workerNamed(ws, w2)
		return ok1 && ok2
	})
	for _, w := range []*workerProc{w1, w2} {
		x, _ := workerNamed(ws, w)
		if x.Pool != "default" || strings.Join(x.Devices, ",") != "cpu" || x.Version == "" || x.State != "up" || x.Lost || x.LeaseS != 2 || x.StartedAt.IsZero() {
			t.Errorf("%s listed as %+v, want pool default, devices cpu, a version, up, lease 2s", w.name, x)
		}
	}
	if got := c.workersJSON("--pool", "gpu"); len(got) != 0 {
		t.Errorf("workers --pool gpu = %+v, want none", got)
	}
	// Freeze w1 while it holds a shard of the run (it keeps the lease
	// until it expires), then kill -9 it there.
	for {
		c.waitFor("w1 to hold a shard", time.Minute, func() bool { return c.heldBy(id, w1) > 0 })
		if err := w1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if c.heldBy(id, w1) > 0 {
			break
		}
		if err := w1.cmd.Process.Signal(syscall.SIGCONT); err != nil { // it committed meanwhile
			t.Fatal(err)
		}
	}
	// w2 is frozen too while status is read: on a machine slow enough for
	// w1's 2 s lease to pass meanwhile, w2 would otherwise claim w1's
	// shard, and w1 would hold nothing to show.
	if err := w2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// status shows the holder with its heartbeat age (or lost, on a
	// machine slow enough that its lease passed meanwhile).
	if st := c.precog("status", "--db", c.dsn, id); !strings.Contains(st.stdout, w1.workerIDPrefix()) ||
		!(strings.Contains(st.stdout, "[heartbeat ") || strings.Contains(st.stdout, "[LOST: no heartbeat for")) {
		t.Errorf("status does not show the holder's heartbeat age:\n%s", st.stdout)
	}
	// status --json lists the same holder with its heartbeat age.
	stj := c.precog("status", "--db", c.dsn, "--json", id)
	var sj struct {
		Holders []struct {
			Worker        string   `json:"worker"`
			State         string   `json:"state"`
			HeartbeatAgeS *float64 `json:"heartbeat_age_s"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(stj.stdout), &sj); err != nil {
		t.Errorf("status --json: %v\n%s", err, stj.stdout)
	}
	found := false
	for _, h := range sj.Holders {
		if strings.HasPrefix(h.Worker, w1.workerIDPrefix()) {
			found = true
			if (h.State != "up" && h.State != "lost") || h.HeartbeatAgeS == nil || *h.HeartbeatAgeS < 0 {
				t.Errorf("status --json: holder %+v, want up or lost with a heartbeat age", h)
			}
		}
	}
	if !found {
		t.Errorf("status --json lists no holder of w1:\n%s", stj.stdout)
	}
	if err := w2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.waitFor("w1 marked lost", 30*time.Second, func() bool {
		x, ok := workerNamed(c.workersJSON(), w1)
		return ok && x.Lost
	})
	ws = c.workersJSON()
	x1, _ := workerNamed(ws, w1)
	x2, ok2 := workerNamed(ws, w2)
	t.Logf("w1 lost %s after kill -9 (heartbeat age %.1fs, lease 2s)", time.Since(killed).Round(time.Millisecond), x1.HeartbeatAgeS)
	if x1.State != "lost" || x1.HeartbeatAgeS <= 2 || !ok2 || x2.Lost {
		t.Errorf("after w1's kill: w1 %+v (want lost, age > lease), w2 %+v (want up)", x1, x2)
	}
	if txt := c.precog("workers", "--db", c.dsn); !strings.Contains(txt.stdout, "LOST") || (len(x1.Current) > 0 && !strings.Contains(txt.stdout, "(expiring)")) {
		t.Errorf("precog workers does not mark w1 lost (and its shards expiring):\n%s", txt.stdout)
	}
	if code, _ := sigterm(t, w2, time.Minute); code != 0 {
		t.Fatalf("w2 after SIGTERM: exit %d", code)
	}
	if _, ok := workerNamed(c.workersJSON(), w2); ok {
		t.Errorf("w2 still listed after a clean stop")
	}
	// Only a lost worker left in the pool: submit warns again.
	c.precog("cancel", "--db", c.dsn, id, "--force")
	if r := c.precog("submit", "--db", c.dsn, c.spec, "--param", "date=2026-11-02"); !strings.Contains(r.stderr, "warning: no worker of pool") {
		t.Errorf("submit with only a lost worker in the pool did not warn: exit %d\n%s", r.code, r.stderr)
	}
}

// TestClusterRejectLimitEarly: a cluster run whose rows are 20% bad fails
// as soon as the ledger's reject count passes max_rejected_fraction of the
// planned rows, before its shards all ran, and publishes nothing; every
// rejected row of its committed shards is in the ledger, exported by
// precog rejects (JSON and CSV), and none is left in the worker's state
// directory.
func TestClusterRejectLimitEarly(t *testing.T) {
	c := newE2ECluster(t, e2eJob{model: "ranker", rowsPerShard: 200, batch: 64}, testservers.Postgres(t).DSN, "", nil)
	bad := testgen.Dataset{Seed: 5, StringKeys: true, FilesPerDate: 20, RowsPerFile: 200, BadFraction: 0.2}
	if _, err := testgen.WriteDataset(filepath.Join(c.dir, "bad"), bad); err != nil {
		t.Fatal(err)
	}
	spec := writeSpec(t, c.dir, "bad.yaml", strings.NewReplacer("data/users/dt={{.date}}", "bad", "rows_per_shard: 1000", "rows_per_shard: 200",
		"date={{.date}}", "bad").Replace(rankerSpec))
	r := c.precog("submit", "--db", c.dsn, spec)
	if r.code != 0 {
		t.Fatalf("submit: exit %d: %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	w := c.worker()
	run := c.waitTerminal(id, 2*time.Minute)
	shards := c.shards(id)
	committed := c.committed(id)
	t.Logf("run %s: %s after %d of %d shards committed, %d rejected: %s", id, run.State, committed, len(shards), run.Counts.Rejected, run.Error)
	if run.State != jobs.RunFailed || !strings.Contains(run.Error, "too many rejected rows") {
		t.Fatalf("run %s: %s (%s), want failed for too many rejected rows", id, run.State, run.Error)
	}
	if len(shards) != 20 || committed >= len(shards)/2 {
		t.Errorf("%d of %d shards committed: the limit was not enforced as shards committed", committed, len(shards))
	}
	if _, err := os.Stat(filepath.Join(c.dir, "out", "scores", "bad", "_SUCCESS")); !os.IsNotExist(err) {
		t.Errorf("the failed run published: %v", err)
	}

	// Every reject of the committed shards is in the ledger.
	jr := c.precog("rejects", "--db", c.dsn, id, "--json")
	var rows []jobs.Reject
	if jr.code != 0 || json.Unmarshal([]byte(jr.stdout), &rows) != nil {
		t.Fatalf("precog rejects --json: exit %d: %s\n%.500s", jr.code, jr.stderr, jr.stdout)
	}
	if int64(len(rows)) != run.Counts.Rejected || run.Counts.Rejected == 0 {
		t.Errorf("precog rejects listed %d rows, the run counted %d", len(rows), run.Counts.Rejected)
	}
	for _, rj := range rows[:min(3, len(rows))] {
		if !strings.Contains(rj.Position, ".parquet row ") || rj.Reason == "" || rj.Key == "" {
			t.Errorf("reject %+v lacks a position, reason or key", rj)
		}
	}
	cr := c.precog("rejects", "--db", c.dsn, id, "--csv", "--limit", "5")
	recs, err := csv.NewReader(strings.NewReader(cr.stdout)).ReadAll()
	if cr.code != 0 || err != nil || len(recs) != 6 || strings.Join(recs[0], ",") != "shard,key,position,reason" {
		t.Errorf("precog rejects --csv --limit 5: exit %d (%v):\n%s", cr.code, err, cr.stdout)
	}
	if !strings.Contains(cr.stderr, "listed 5 of the run's") {
		t.Errorf("rejects --limit does not say it listed part of them: %s", cr.stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(c.dir, ".precog-w*", "rejects", "*", "*")); len(files) != 0 {
		t.Errorf("the worker wrote reject files in its state directory: %v", files)
	}
	stopWorkers(t, w)

	// A run allowed its rejects, on a worker storing at most 10 of a run:
	// it succeeds, counts every reject, stores 10, and precog rejects says so.
	lenient := writeSpec(t, c.dir, "lenient.yaml", "max_rejected_fraction: 1\n"+strings.NewReplacer("data/users/dt={{.date}}", "bad",
		"rows_per_shard: 1000", "rows_per_shard: 200", "date={{.date}}", "lenient").Replace(rankerSpec))
	r = c.precog("submit", "--db", c.dsn, lenient)
	if r.code != 0 {
		t.Fatalf("submit lenient: exit %d: %s", r.code, r.stderr)
	}
	id = strings.TrimSpace(r.stdout)
	w2 := c.worker("--max-stored-rejects", "10")
	if run = c.waitTerminal(id, 2*time.Minute); run.State != jobs.RunSucceeded {
		t.Fatalf("lenient run: %s (%s)", run.State, run.Error)
	}
	jr = c.precog("rejects", "--db", c.dsn, id, "--json")
	rows = nil
	if err := json.Unmarshal([]byte(jr.stdout), &rows); err != nil || len(rows) != 10 || run.Counts.Rejected <= 10 ||
		!strings.Contains(jr.stderr, "counted, not stored") {
		t.Errorf("rejects of a run past the cap: %d rows (%v) of %d; stderr %q", len(rows), err, run.Counts.Rejected, jr.stderr)
	}
	stopWorkers(t, w2)
}
