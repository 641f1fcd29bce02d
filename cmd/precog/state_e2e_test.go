package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/dashboard"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	redissink "github.com/precog-ml/precog/sinks/redis"
)

// killedRun is a local run killed with SIGKILL once it had committed
// shards to Redis.
type killedRun struct {
	dir, spec, state string
	args             []string
	ns, version      string
}

// redisJobSpec is the heavy ranker in 24 small shards into Redis alone:
// slow enough to be killed mid-run.
func redisJobSpec(t *testing.T, dir string, rd *testservers.RedisServer, ns string) string {
	t.Helper()
	t.Setenv("TEST_REDIS_ADDR", rd.Addr)
	t.Setenv("TEST_REDIS_DB", strconv.Itoa(rd.DB))
	t.Setenv("TEST_NS", ns)
	body := strings.NewReplacer("models/ranker.onnx", "models/heavy.onnx", "rows_per_shard: 1000", "rows_per_shard: 200",
		"batch_size: 256", "batch_size: 16").Replace(rankerSpec)
	body = strings.Replace(body, "  parquet: { path: \"out/scores/date={{.date}}\" }\n",
		"  redis: { addr: \"${TEST_REDIS_ADDR}\", db: \"${TEST_REDIS_DB}\", namespace: \"${TEST_NS}\" }\n", 1)
	return writeSpec(t, dir, "job.yaml", body)
}

// runAndKill starts `precog run` with --parallel 1 and kills it (SIGKILL)
// once Redis holds the commit markers of two shards: with one shard at a
// time, the second marker means the ledger recorded the first commit.
func runAndKill(t *testing.T, rd *testservers.RedisServer) killedRun {
	t.Helper()
	ctx := context.Background()
	dir := workdir(t)
	k := killedRun{dir: dir, state: ".precog", ns: rd.Prefix + "scores"}
	k.spec = redisJobSpec(t, dir, rd, k.ns)
	k.args = []string{"run", k.spec, "--param", "date=2026-11-02", "--parallel", "1", "--no-progress"}
	cmd := exec.Command(precogBin, append([]string{"--state-dir", filepath.Join(dir, k.state)}, k.args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c := rd.Client(t)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		keys, _ := c.Keys(ctx, k.ns+":shards:*").Result()
		if len(keys) == 1 && c.HLen(ctx, keys[0]).Val() >= 2+2 { // format, encoding, two markers
			k.version = strings.TrimPrefix(keys[0], k.ns+":shards:")
			break
		}
		select {
		case <-exited:
			t.Fatalf("the run ended before two shards were committed: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the run never committed two shards: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if c.Exists(ctx, k.ns+":current").Val() != 0 {
		t.Fatal("the run published before the kill: nothing is interrupted")
	}
	return k
}

// TestKilledRunShownInterrupted: after kill -9 of `precog run`, status and
// runs show the run interrupted, with no rate, no ETA, no worker, its
// shards none running, and the command that resumes it; that command
// resumes it (issue 31.4: the dead run was shown running, with a rate, an
// ETA and the dead process as its worker).
func TestKilledRunShownInterrupted(t *testing.T) {
	rd := testservers.Redis(t)
	k := runAndKill(t, rd)

	runs := precogState(t, k.dir, k.state, "runs", "--json")
	var list []runview.Run
	if err := json.Unmarshal([]byte(runs.stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("runs --json: %v (%d runs)\n%s\n%s", err, len(list), runs.stdout, runs.stderr)
	}
	id := list[0].ID
	if got := list[0]; got.State != runview.StateInterrupted || got.RowsPerS != 0 || got.Shards.Running != 0 || !strings.Contains(got.Resume, "run "+k.spec) {
		t.Fatalf("runs --json after kill -9: state %q, rows/s %v, running shards %d, resume %q; want interrupted, 0, 0 and the run command",
			got.State, got.RowsPerS, got.Shards.Running, got.Resume)
	}
	// The dashboard over the same state directory says the same (it said
	// running, as runview alone does, before it asked whether the run's
	// process is alive).
	stateDir := filepath.Join(k.dir, k.state)
	dash, err := dashboard.New(dashboard.Options{Source: dashboard.BoltDir{StateDir: stateDir}, StateDir: stateDir, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(dash)
	defer hs.Close()
	for _, path := range []string{"/api/runs", "/api/runs/" + id} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var one struct{ Run runview.Run }
		var many []runview.Run
		if path == "/api/runs" {
			err = json.Unmarshal(body, &many)
			if len(many) == 1 {
				one.Run = many[0]
			}
		} else {
			err = json.Unmarshal(body, &one)
		}
		if err != nil || one.Run.State != runview.StateInterrupted || !strings.Contains(one.Run.Resume, "run "+k.spec) {
			t.Errorf("dashboard %s after kill -9: %v, state %q, resume %q; want interrupted with the run command\n%s", path, err, one.Run.State, one.Run.Resume, body)
		}
	}
	js := precogState(t, k.dir, k.state, "status", id, "--json")
	var status runview.Status
	if err := json.Unmarshal([]byte(js.stdout), &status); err != nil {
		t.Fatalf("status --json: %v\n%s", err, js.stdout)
	}
	if status.State != runview.StateInterrupted || len(status.Holders) != 0 || status.Shards.Committed == 0 {
		t.Fatalf("status --json after kill -9: state %q, holders %v, committed %d; want interrupted, none, >0", status.State, status.Holders, status.Shards.Committed)
	}
	text := precogState(t, k.dir, k.state, "status", id)
	for _, bad := range []string{"rows/s", "ETA", "workers"} {
		if strings.Contains(text.stdout, bad) {
			t.Errorf("status of the interrupted run shows %q:\n%s", bad, text.stdout)
		}
	}
	if !strings.Contains(text.stdout, "interrupted") || !strings.Contains(text.stdout, "resume") || !strings.Contains(text.stdout, "--param date=2026-11-02") {
		t.Errorf("status of the interrupted run names no state or resume command:\n%s", text.stdout)
	}

	r := precogState(t, k.dir, k.state, k.args...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "resumed:") {
		t.Errorf("the rerun did not resume the interrupted run:\n%s", r.stdout)
	}
	after := precogState(t, k.dir, k.state, "status", id, "--json")
	if err := json.Unmarshal([]byte(after.stdout), &status); err != nil || status.State != "succeeded" {
		t.Fatalf("status after the resume: %v %q\n%s", err, status.State, after.stdout)
	}
}

// TestCancelDoesNotScanTheKeyspace: with 1,000,000 unrelated keys in
// Redis, cancelling a local run that wrote shards, and a cluster run that
// is still pending, deletes exactly the run's keys with no SCAN and well
// under a second of the server's time; the local cancel names what it
// removed per sink (issue 31.3: a cancel scanned the whole keyspace; 31.17:
// a local cancel printed no per-sink lines).
func TestCancelDoesNotScanTheKeyspace(t *testing.T) {
	ctx := context.Background()
	rd := testservers.NewRedis(t, "--enable-debug-command", "local")
	k := runAndKill(t, rd)
	c := rd.Client(t)
	const others = 1_000_000
	// A million keys take the server seconds on a busy machine: no read
	// timeout for this one command, a deadline no machine needs instead.
	opts := *c.Options()
	opts.ReadTimeout = -1
	slow := goredis.NewClient(&opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := slow.Do(pctx, "DEBUG", "POPULATE", others, "other").Err()
	cancel()
	slow.Close()
	if err != nil {
		t.Fatal(err)
	}
	written := len(keysOf(t, c, k.ns+":"+k.version+":*"))
	if written == 0 {
		t.Fatal("the killed run left no records to delete")
	}
	runs := precogState(t, k.dir, k.state, "runs", "--json")
	var list []runview.Run
	if err := json.Unmarshal([]byte(runs.stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("runs --json: %v\n%s", err, runs.stdout)
	}
	c.ConfigResetStat(ctx)
	start := time.Now()
	out := precogState(t, k.dir, k.state, "cancel", list[0].ID)
	took := time.Since(start)
	if out.code != 0 {
		t.Fatalf("cancel: exit %d\n%s\n%s", out.code, out.stdout, out.stderr)
	}
	checkNoScan(t, c, "cancel of a run that wrote "+strconv.Itoa(written)+" records")
	if !strings.Contains(out.stdout, "redis: removed the data of version "+k.version) {
		t.Errorf("local cancel printed no per-sink line:\n%s", out.stdout)
	}
	// The killed writer's lock stays until its lease ends (it is not the
	// cancel's to break; on a busy machine the lease may have ended by now);
	// nothing else of the namespace may.
	left := keysOf(t, c, k.ns+":*")
	if n := c.DBSize(ctx).Val(); n != others+int64(len(left)) || len(left) > 1 || (len(left) == 1 && left[0] != k.ns+":lock") {
		t.Fatalf("DBSIZE %d after the cancel, want the %d other keys and the namespace's lock; the namespace holds %v", n, others, left)
	}
	t.Logf("cancel of a run that wrote %d records among %d keys: %v (the whole command)", written, others, took)

	// A pending cluster run: submitted, no worker ever ran it.
	pg := testservers.Postgres(t)
	c.ConfigResetStat(ctx)
	sub := precogState(t, k.dir, k.state, "submit", k.spec, "--param", "date=2026-11-01", "--db", pg.DSN)
	if sub.code != 0 {
		t.Fatalf("submit: exit %d\n%s", sub.code, sub.stderr)
	}
	id := strings.TrimSpace(sub.stdout)
	c.ConfigResetStat(ctx)
	out = precogState(t, k.dir, k.state, "cancel", id, "--db", pg.DSN)
	if out.code != 0 {
		t.Fatalf("cancel of the pending run: exit %d\n%s\n%s", out.code, out.stdout, out.stderr)
	}
	checkNoScan(t, c, "cancel of a pending run")
	if n := c.DBSize(ctx).Val(); n != others+1 {
		t.Fatalf("DBSIZE %d after the pending run's cancel, want %d and the lock", n, others)
	}
}

// checkNoScan fails when Redis ran a SCAN or spent a second on commands
// since the last CONFIG RESETSTAT (INFO commandstats, the server's clock).
func checkNoScan(t *testing.T, c *goredis.Client, what string) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var spent time.Duration
	var calls int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		var n, usec int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(rest, ",", " "), "%d usec=%d", &n, &usec); err != nil {
			t.Fatalf("commandstats %q: %v", line, err)
		}
		if name == "cmdstat_scan" || name == "cmdstat_keys" {
			t.Fatalf("%s ran %s %d times:\n%s", what, name, n, info)
		}
		calls += n
		spent += time.Duration(usec) * time.Microsecond
	}
	if spent > time.Second {
		t.Fatalf("%s took Redis %v, want well under a second", what, spent)
	}
	t.Logf("%s: %d commands, %v in Redis", what, calls, spent)
}

// keysOf lists the keys matching pattern (SCAN; test use only).
func keysOf(t *testing.T, c *goredis.Client, pattern string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(context.Background(), 0, pattern, 10000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDashboardCancelWithoutSinkSecrets: the dashboard's Cancel in a
// process without the sinks' environment cancels the run and says so
// ("cancelled; sink cleanup pending: …", no error), the ledger records the
// pending cleanup, and a worker, which has the environment, removes what
// the run wrote and clears the record (issue 31.6: the dashboard answered
// 409 "Cancel … did not happen" while the run was cancelled).
func TestDashboardCancelWithoutSinkSecrets(t *testing.T) {
	ctx := context.Background()
	rd := testservers.Redis(t)
	pg := testservers.Postgres(t)
	c := newE2ECluster(t, e2eJob{model: "ranker", rowsPerShard: 1000, batch: 256, redisSink: true}, pg.DSN, "", rd)
	if _, set := os.LookupEnv("TEST_REDIS_ADDR"); set {
		t.Fatal("TEST_REDIS_ADDR is set in the test process: the dashboard would have the sinks' environment")
	}
	id := c.submit()
	run, err := c.led.Run(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// What the run's writers would have left: a record, its key record
	// and the version's shard markers (the sink's own layout).
	rc := rd.Client(t)
	l := redissink.Layout{Namespace: c.ns}
	rec := l.Record(run.Version, "user-1")
	rc.Set(ctx, rec, `{"score":1}`, 0)
	rc.Set(ctx, l.Keys(run.Version), string(binary.AppendUvarint(nil, uint64(len("user-1"))))+"user-1", 0)
	rc.HSet(ctx, l.Shards(run.Version), "format", 1, "encoding", "json")

	led := &openedLedger{Store: c.led, cluster: c.led, where: "the Postgres ledger"}
	msg, err := clusterActions(led, 0, slog.Default()).Cancel(ctx, id)
	if err != nil {
		t.Fatalf("dashboard Cancel without the sinks' environment: error %v, want the run cancelled and said so", err)
	}
	if !strings.Contains(msg, "cancelled; sink cleanup pending") || !strings.Contains(msg, "TEST_REDIS_ADDR") {
		t.Fatalf("dashboard Cancel said %q; want \"cancelled; sink cleanup pending\" and why", msg)
	}
	if r, _ := c.led.Run(ctx, id); r.State != "cancelled" {
		t.Fatalf("run %s is %s after the dashboard's Cancel", id, r.State)
	}
	if due, err := c.led.CleanupsDue(ctx, "default", 10); err != nil || len(due) != 1 || due[0] != id {
		t.Fatalf("pending cleanups %v (%v), want [%s]", due, err, id)
	}
	if rc.Exists(ctx, rec).Val() != 1 {
		t.Fatal("the record went without the sinks' environment")
	}

	c.worker()
	// Until the record is gone: a worker's claim hides it from
	// CleanupsDue while its removal is still under way.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.led.PendingCleanup(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker finished the pending cleanup in 2 minutes:\n%s", c.logTails(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := rc.Exists(ctx, rec, l.Keys(run.Version), l.Shards(run.Version)).Val(); n != 0 {
		t.Fatalf("%d of the run's keys remain after the worker's cleanup", n)
	}
}

// TestStatusWatchBackfill: `status BF --watch --json` on the Postgres
// ledger follows a backfill from before any worker runs it until every
// value is done, one object per change, and exits 0 (issue 31.8: it
// printed one snapshot and exited).
func TestStatusWatchBackfill(t *testing.T) {
	pg := testservers.Postgres(t)
	c := newE2ECluster(t, e2eJob{model: "ranker", rowsPerShard: 1000, batch: 256}, pg.DSN, "", nil)
	r := c.precog("backfill", c.spec, "--from", usersData.Dates[0], "--to", usersData.Dates[1], "--db", c.dsn)
	if r.code != 0 {
		t.Fatalf("backfill: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)

	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, "--state-dir", filepath.Join(c.dir, ".precog"), "status", id, "--watch", "--json", "--db", c.dsn)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	var first map[string]any
	if err := dec.Decode(&first); err != nil {
		t.Fatalf("the watch printed no first object: %v\n%s", err, stderr.String())
	}
	if first["state"] == "succeeded" {
		t.Fatalf("the backfill succeeded before any worker ran: %v", first)
	}
	c.worker() // only now can the backfill move
	lines, last := 1, first
	for {
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			break
		}
		lines++
		last = v
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch of the backfill: %v\n%s", err, stderr.String())
	}
	if last["state"] != "succeeded" || lines < 2 {
		t.Fatalf("the watch printed %d objects, the last %v; want it to follow the backfill until it succeeded", lines, last["state"])
	}
}

// TestLostWorkerListsOnlyWhatItHolds: a lost worker's row lists as
// expiring only the shards it still holds in the ledger, not those
// committed since (issue 31.17: "(expiring)" holds listed minutes after
// the run succeeded).
func TestLostWorkerListsOnlyWhatItHolds(t *testing.T) {
	ctx := context.Background()
	pg := testservers.Postgres(t)
	led := clusterLedger(t, pg.DSN)
	const id = "lost-holds-run"
	run := jobs.Run{ID: id, Job: "j", Version: "v1", ParamsKey: id, State: jobs.RunPending, Shards: 2, Pool: "default", CreatedAt: time.Now()}
	if err := led.CreateRun(ctx, run, []jobs.Shard{{RunID: id, Index: 0, State: jobs.ShardPending}, {RunID: id, Index: 1, State: jobs.ShardPending}}); err != nil {
		t.Fatal(err)
	}
	var held []ledger.ShardRef
	for range 2 {
		sh, err := led.Claim(ctx, id, "w-lost/cpu", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ledger.ShardRef{Run: id, Shard: sh.Index, Device: "cpu"})
	}
	if err := led.Complete(ctx, ledger.CompleteParams{RunID: id, Shard: held[0].Shard, Worker: "w-lost/cpu"}); err != nil {
		t.Fatal(err)
	}
	if err := led.HeartbeatWorker(ctx, ledger.WorkerInfo{ID: "w-lost", Pool: "default", Devices: []string{"cpu"}, Lease: time.Millisecond, Current: held}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for { // lost once a lease passed on the ledger's clock
		ws, err := led.ListWorkers(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 && ws[0].Lost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker never lost: %+v", ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := precog(t, t.TempDir(), "workers", "--db", pg.DSN)
	done, open := fmt.Sprintf("%s#%d", id, held[0].Shard), fmt.Sprintf("%s#%d (expiring)", id, held[1].Shard)
	if r.code != 0 || strings.Contains(r.stdout, done) || !strings.Contains(r.stdout, open) {
		t.Fatalf("workers: exit %d; want %q listed and the committed %s not:\n%s%s", r.code, open, done, r.stdout, r.stderr)
	}
}

// TestRetryBackfillMissingVariable: retrying a backfill whose spec needs a
// variable this environment lacks is a configuration error, exit 2 (issue
// 31.17: exit 1).
func TestRetryBackfillMissingVariable(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	t.Setenv("TEST_BF_OUT", "out")
	spec := writeSpec(t, dir, "job.yaml", strings.Replace(rankerSpec, `"out/scores/`, `"${TEST_BF_OUT}/scores/`, 1))
	r := precog(t, dir, "backfill", spec, "--from", usersData.Dates[0], "--to", usersData.Dates[1], "--db", pg.DSN)
	if r.code != 0 {
		t.Fatalf("backfill: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if c := precog(t, dir, "cancel", id, "--db", pg.DSN); c.code != 0 {
		t.Fatalf("cancel: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	os.Unsetenv("TEST_BF_OUT") // t.Setenv restores it
	rr := precog(t, dir, "retry", id, "--db", pg.DSN)
	if rr.code != 2 || !strings.Contains(rr.stderr, "TEST_BF_OUT is not set") {
		t.Fatalf("retry of the backfill without TEST_BF_OUT: exit %d, want 2 naming the variable\n%s", rr.code, rr.stderr)
	}
}

// TestScheduleListDB: schedule list takes --db like every command that
// reads the ledger, and reads the last run from it (issue 31.17: unknown
// flag).
func TestScheduleListDB(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	writeSpec(t, dir, "jobs/scores.yaml", "schedule: \"0 4 * * *\"\n"+strings.ReplaceAll(rankerSpec, "{{.date}}", "x"))
	r := precog(t, dir, "schedule", "list", "--jobs", filepath.Join(dir, "jobs"), "--db", pg.DSN)
	if r.code != 0 || !strings.Contains(r.stdout, "scores") {
		t.Fatalf("schedule list --db: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestBackfillOneDuration: the duration precog backfill prints for a
// value is the one status (and the dashboard, through runview) shows for
// it, a queued value's wait included; and its runs, created by the
// backfill before they start, are logged as starting, not as "resuming
// run … committed_shards=0" (issue 31.17: 50.3 s in the CLI, 81.5 s on the
// dashboard; new runs logged as resumed).
func TestBackfillOneDuration(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	r := precog(t, dir, "--log-level", "info", "backfill", spec, "--from", usersData.Dates[0], "--to", usersData.Dates[1], "--parallel", "1")
	if r.code != 0 {
		t.Fatalf("backfill: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "resuming run") || !strings.Contains(r.stderr, "starting run") {
		t.Errorf("new runs of the backfill logged as resumed (or not as started):\n%s", r.stderr)
	}
	printed := map[string]time.Duration{}
	for _, line := range strings.Split(r.stderr, "\n") { // the summary
		if !strings.Contains(line, "succeeded") || !strings.HasPrefix(line, "date=") {
			continue
		}
		f := strings.Fields(line)
		d, err := time.ParseDuration(f[len(f)-1])
		if err != nil {
			t.Fatalf("summary line %q: %v", line, err)
		}
		printed[strings.TrimPrefix(f[0], "date=")] = d
	}
	bf := precog(t, dir, "runs", "--json")
	var runs []runview.Run
	if err := json.Unmarshal([]byte(bf.stdout), &runs); err != nil || len(runs) != 2 {
		t.Fatalf("runs --json: %v\n%s", err, bf.stdout)
	}
	st := precog(t, dir, "status", runs[0].Backfill, "--json")
	var view struct {
		Dates []struct {
			Value     string  `json:"value"`
			DurationS float64 `json:"duration_s"`
		} `json:"dates"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &view); err != nil || len(view.Dates) != 2 {
		t.Fatalf("status BF --json: %v\n%s", err, st.stdout)
	}
	for _, d := range view.Dates {
		want := time.Duration(d.DurationS * float64(time.Second)).Round(time.Millisecond)
		if got, ok := printed[d.Value]; !ok || got != want {
			t.Errorf("date %s: backfill printed %v, status says %v (the same run)\n%s", d.Value, got, want, r.stderr)
		}
	}
}
