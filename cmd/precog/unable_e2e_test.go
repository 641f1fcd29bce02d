package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// TestClusterWorkerCannotLoadSpec: a worker without the sinks' environment
// (TEST_SINK_DSN unset, so the job's Postgres sink does not load there)
// gives every shard it claims back without spending an attempt, lists the
// run as one it cannot execute (`precog workers`, its /readyz, the run's
// status), and the run waits instead of failing; a healthy worker started
// then finishes it. Before, the first worker failed shard 0 three times in
// 50 ms and the run failed.
func TestClusterWorkerCannotLoadSpec(t *testing.T) {
	j := e2eJob{model: "ranker", rowsPerShard: 1000, batch: 256, pgSink: true}
	pg := testservers.Postgres(t)
	c := newE2ECluster(t, j, pg.DSN, pg.DSN, nil)
	id := c.submit()

	full := c.env
	c.env = slices.DeleteFunc(slices.Clone(full), func(kv string) bool { return strings.HasPrefix(kv, "TEST_SINK_DSN=") })
	addr := freeAddr(t)
	bad := c.worker("--addr", addr)
	c.env = full

	var reason string
	c.waitFor("precog workers to list the run the worker cannot execute", time.Minute, func() bool {
		if r := c.run(id); r.State.Terminal() {
			t.Fatalf("run %s is %s (%s), want it waiting for a worker that can run it", id, r.State, r.Error)
		}
		x, ok := workerNamed(c.workersJSON(), bad)
		for _, u := range x.Unable {
			if ok && u.Run == id && u.Job != "" {
				reason = u.Reason
			}
		}
		return reason != ""
	})
	if !strings.Contains(reason, "TEST_SINK_DSN") {
		t.Errorf("the worker's reason %q does not name the missing variable", reason)
	}
	// Nothing was spent: no attempt failed, the run waits.
	if r := c.run(id); r.State.Terminal() {
		t.Fatalf("run %s is %s (%s), want it waiting for a worker that can run it", id, r.State, r.Error)
	}
	for _, s := range c.shards(id) {
		if s.State == jobs.ShardFailed || s.Error != "" || s.Attempts > 1 {
			t.Fatalf("shard %d = %s, attempts %d, error %q: want no attempt spent", s.Index, s.State, s.Attempts, s.Error)
		}
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), id) || !strings.Contains(string(body), "TEST_SINK_DSN") {
		t.Errorf("/readyz of the unable worker = %d %s, want 503 naming the run and the variable", resp.StatusCode, body)
	}
	if st := c.precog("status", "--db", c.dsn, id); !strings.Contains(st.stdout, "cannot run") || !strings.Contains(st.stdout, "TEST_SINK_DSN") {
		t.Errorf("status does not say why the run waits:\n%s", st.stdout)
	}
	var sj struct {
		CannotRun []string `json:"cannot_run"`
	}
	if st := c.precog("status", "--db", c.dsn, "--json", id); json.Unmarshal([]byte(st.stdout), &sj) != nil || len(sj.CannotRun) != 1 {
		t.Errorf("status --json cannot_run = %v, want the worker and its reason:\n%s", sj.CannotRun, st.stdout)
	}

	good := c.worker()
	if r := c.waitTerminal(id, 2*time.Minute); r.State != jobs.RunSucceeded || r.Counts.RowsOut == 0 {
		t.Fatalf("run %s = %s (%s), rows out %d; want succeeded by the healthy worker", id, r.State, r.Error, r.Counts.RowsOut)
	}
	for _, s := range c.shards(id) {
		if !strings.HasPrefix(s.Worker, strings.TrimSuffix(good.workerIDPrefix(), "/")) && s.Worker != "" {
			t.Errorf("shard %d committed by %s, want the healthy worker", s.Index, s.Worker)
		}
	}
	// Once the run ended, the unable worker forgets it and is ready again.
	c.waitFor("the unable worker to forget the finished run", time.Minute, func() bool {
		x, ok := workerNamed(c.workersJSON(), bad)
		return ok && len(x.Unable) == 0
	})
	stopWorkers(t, bad, good)
}
