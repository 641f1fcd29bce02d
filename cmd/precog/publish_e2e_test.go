package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/runview"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks/parquet"
)

// These end-to-end tests check that control commands respect the publish
// (README, guarantees): cancel, retry and rollback never leave the stores
// on different versions, with real workers, Postgres and Redis.

// e2eQuick is a fast job (the light model, 8 shards of 500 rows) into all
// three sinks, for tests that run several runs to the end.
var e2eQuick = e2eJob{model: "ranker", rowsPerShard: 500, batch: 64, pgSink: true, redisSink: true}

// setEnvOf gives this test process the cluster's environment (the spec's
// ${VARS}), for what it does in process as a worker would.
func (c *e2eCluster) setEnvOf() {
	for _, kv := range c.env {
		k, v, _ := strings.Cut(kv, "=")
		c.t.Setenv(k, v)
	}
}

// failLikeAWorker fails the run as a worker whose shard ran out of
// attempts does (runner's endRun): failed in the ledger, then aborted in
// every sink, which drops what the workers prepared for it.
func (c *e2eCluster) failLikeAWorker(id string) {
	c.t.Helper()
	ctx := context.Background()
	if err := c.led.SetRunState(ctx, id, jobs.RunFailed, "test: a shard failed for good"); err != nil {
		c.t.Fatalf("fail run %s: %v", id, err)
	}
	run, err := c.led.Run(ctx, id)
	if err != nil {
		c.t.Fatal(err)
	}
	c.setEnvOf()
	if err := abortSinks(ctx, run, cancelOptions{out: io.Discard, log: slog.New(slog.DiscardHandler)}); err != nil {
		c.t.Fatalf("abort run %s in its sinks: %v", id, err)
	}
}

// statusOf is `precog status RUN --json`.
func (c *e2eCluster) statusOf(id string) runview.Run {
	c.t.Helper()
	st := c.precog("status", id, "--json", "--db", c.dsn)
	var v runview.Run
	if st.code != 0 || json.Unmarshal([]byte(st.stdout), &v) != nil {
		c.t.Fatalf("status --json %s: exit %d %s%s", id, st.code, st.stdout, st.stderr)
	}
	return v
}

// TestClusterCancelEndsShards: cancelling a run whose shards workers hold
// under a long lease (30s) ends its open shards in the cancel's own
// transaction (status shows 0 running, and no worker), and cancel returns
// as soon as the holders stopped, not when their leases run out.
func TestClusterCancelEndsShards(t *testing.T) {
	c := newE2ECluster(t, e2eAllSinks, testservers.Postgres(t).DSN, testservers.Postgres(t).DSN, testservers.Redis(t))
	id := c.submit()
	w1 := c.worker("--lease", "30s")
	w2 := c.worker("--lease", "30s")
	c.waitFor("2 committed shards and both workers mid-shard", time.Minute, func() bool {
		return c.committed(id) >= 2 && c.heldBy(id, w1) >= 0 && c.heldBy(id, w2) >= 0
	})
	began := time.Now()
	r := c.precog("cancel", id, "--db", c.dsn)
	took := time.Since(began)
	t.Logf("cancel with two holders (30s leases) took %s", took.Round(time.Millisecond))
	if r.code != 0 || !strings.Contains(r.stdout, "run "+id+" cancelled") {
		t.Fatalf("cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if took > 15*time.Second {
		t.Errorf("cancel took %s: it waited for the leases to run out instead of for the holders to stop", took)
	}
	v := c.statusOf(id)
	if v.State != "cancelled" || v.Shards.Running != 0 || v.Shards.Pending != 0 {
		t.Errorf("status after cancel: state %s, shards %+v; want cancelled with none running or pending", v.State, v.Shards)
	}
	for _, s := range c.shards(id) {
		if s.State == jobs.ShardRunning || s.State == jobs.ShardPending {
			t.Errorf("shard %d is %s after cancel", s.Index, s.State)
		}
		if !s.LeaseUntil.IsZero() && s.LeaseUntil.After(time.Now().Add(time.Second)) {
			t.Errorf("shard %d still carries %s's lease mark until %s: the holder did not let go", s.Index, s.Worker, s.LeaseUntil)
		}
	}
	c.checkNothingPublished(id)
	stopWorkers(t, w1, w2)
}

// TestClusterRetryOnLongLivedWorkers: a run fails mid-run (aborted in every
// sink, as a worker does), and `precog retry --wait` on the same workers,
// never restarted, completes it exactly: the workers prepare the retried
// run's sinks again instead of writing into what the failure dropped.
func TestClusterRetryOnLongLivedWorkers(t *testing.T) {
	j := e2eAllSinks
	c := newE2ECluster(t, j, testservers.Postgres(t).DSN, testservers.Postgres(t).DSN, testservers.Redis(t))
	want := c.reference(j)
	id := c.submit()
	w1, w2 := c.worker(), c.worker()
	c.waitFor("3 committed shards (both workers have the run prepared)", time.Minute, func() bool {
		return c.committed(id) >= 3 && strings.Contains(w1.log.String(), id) && strings.Contains(w2.log.String(), id)
	})
	c.failLikeAWorker(id)
	r := c.precog("retry", id, "--db", c.dsn, "--wait", "--no-progress")
	if r.code != 0 {
		t.Fatalf("retry --wait on the same workers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := c.run(id); got.State != jobs.RunSucceeded || got.Retries != 1 {
		t.Fatalf("retried run: %s, retries %d; want succeeded after 1 retry", got.State, got.Retries)
	}
	c.checkOutputs(j, want)
	stopWorkers(t, w1, w2)
}

// TestClusterControlRespectsPublish: retry refuses a run a newer success
// superseded, and forced, its publish is refused by every sink (the stores
// stay on the newer version); rollback and cancel refuse while a run of
// the target is in its publish step; a run that failed at publish says so
// when retried.
func TestClusterControlRespectsPublish(t *testing.T) {
	j := e2eQuick
	c := newE2ECluster(t, j, testservers.Postgres(t).DSN, testservers.Postgres(t).DSN, testservers.Redis(t))
	ctx := context.Background()
	w := c.worker()
	runToEnd := func() string {
		id := c.submit()
		if r := c.waitTerminal(id, 2*time.Minute); r.State != jobs.RunSucceeded {
			t.Fatalf("run %s: %s %s", id, r.State, r.Error)
		}
		return id
	}
	a := runToEnd()
	// b fails before any shard ran; c, newer, succeeds.
	stopWorkers(t, w)
	b := c.submit()
	c.failLikeAWorker(b)
	w = c.worker()
	cc := runToEnd()
	versionOf := func(id string) string { return c.run(id).Version }

	r := c.precog("retry", b, "--db", c.dsn)
	if r.code != 2 || !strings.Contains(r.stderr, "superseded") || !strings.Contains(r.stderr, cc) {
		t.Fatalf("retry of a superseded run: exit %d, want 2 naming %s\n%s%s", r.code, cc, r.stdout, r.stderr)
	}
	if got := c.run(b); got.State != jobs.RunFailed {
		t.Fatalf("refused retry changed the run: %s", got.State)
	}
	r = c.precog("retry", b, "--db", c.dsn, "--force", "--wait", "--no-progress")
	if r.code == 0 {
		t.Fatalf("forced retry of a superseded run published it:\n%s%s", r.stdout, r.stderr)
	}
	if got := c.run(b); got.State != jobs.RunFailed || !strings.Contains(got.Error, "later version") {
		t.Fatalf("forced retry: run %s %q; want failed at publish, a later version published", got.State, got.Error)
	}
	c.storesOn(versionOf(cc))

	// d is in its publish step (a worker holds its publish lease).
	stopWorkers(t, w)
	d := c.submit()
	for {
		_, _, err := c.led.ClaimNext(ctx, "default", "pub", time.Minute)
		if err != nil {
			break
		}
	}
	for _, s := range c.shards(d) {
		if err := c.led.Complete(ctx, d, s.Index, "pub", jobs.Counts{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.led.ClaimPublish(ctx, d, "pub", time.Minute); err != nil {
		t.Fatal(err)
	}
	r = c.precog("rollback", c.spec, "--param", "date="+e2eDate, "--db", c.dsn)
	if r.code == 0 || !strings.Contains(r.stderr, "is publishing") {
		t.Fatalf("rollback while %s publishes: exit %d\n%s%s", d, r.code, r.stdout, r.stderr)
	}
	c.storesOn(versionOf(cc))
	r = c.precog("cancel", d, "--db", c.dsn)
	if r.code != 2 || !strings.Contains(r.stderr, "publishing") {
		t.Fatalf("cancel of a publishing run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := c.run(d); got.State != jobs.RunPublishing {
		t.Fatalf("refused cancel changed the run: %s", got.State)
	}
	if err := c.led.FinishPublish(ctx, d, "pub", jobs.RunFailed, "test"); err != nil {
		t.Fatal(err)
	}
	// With nothing publishing, rollback goes through (to a's version).
	r = c.precog("rollback", c.spec, "--param", "date="+e2eDate, "--db", c.dsn)
	if r.code != 0 {
		t.Fatalf("rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, versionOf(a)) {
		t.Errorf("rollback went elsewhere than %s:\n%s", versionOf(a), r.stdout)
	}

	// b failed at publish with every shard committed: retry says so.
	r = c.precog("retry", b, "--db", c.dsn, "--force")
	if r.code != 0 || !strings.Contains(r.stdout, "failed at publish") || strings.Contains(r.stdout, "nothing to retry") {
		t.Fatalf("retry of a run that failed at publish: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// storesOn checks that the Postgres view and Redis current name version,
// and that the Parquet output's marker does.
func (c *e2eCluster) storesOn(version string) {
	c.t.Helper()
	ctx := context.Background()
	rc := c.rdb.Client(c.t)
	if cur, err := rc.Get(ctx, c.ns+":current").Result(); err != nil || cur != version {
		c.t.Errorf("redis current = %q (%v), want %s", cur, err, version)
	}
	var pgv string
	conn, err := pgx.Connect(ctx, c.sinkDSN)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT version FROM precog_versions WHERE table_name = $1 AND is_current`, c.table).Scan(&pgv); err != nil || pgv != version {
		c.t.Errorf("postgres current version = %q (%v), want %s", pgv, err, version)
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "out", "scores", "date="+e2eDate, parquet.MarkerFile))
	if err != nil || !strings.Contains(string(b), version) {
		c.t.Errorf("parquet _PRECOG = %s (%v), want version %s", b, err, version)
	}
}

// TestReplaceWaitsForPublish: the scheduler's concurrency: replace does not
// cancel a run in its publish step (the ledger refuses under the run's
// lock): it reports why, the run stays publishing and finishes; a run not
// publishing is cancelled as before.
func TestReplaceWaitsForPublish(t *testing.T) {
	ctx := context.Background()
	led := clusterLedger(t, testservers.Postgres(t).DSN)
	g := &globals{log: slog.New(slog.DiscardHandler)}
	mk := func(id, params string) jobs.Run {
		now := time.Now().UTC()
		r := jobs.Run{ID: id, Job: "recs", Version: id, ParamsKey: params, Pool: "default", State: jobs.RunPending, Shards: 1, CreatedAt: now, UpdatedAt: now}
		if err := led.CreateRun(ctx, r, []jobs.Shard{{RunID: id, Index: 0, Plan: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	pub := mk("pub", "date=1")
	if _, err := led.Claim(ctx, pub.ID, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := led.Complete(ctx, pub.ID, 0, "w", jobs.Counts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := led.ClaimPublish(ctx, pub.ID, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	err := cancelForReplace(ctx, g, led, pub)
	if !errors.Is(err, ledger.ErrPublishing) || !strings.Contains(err.Error(), "replace waits") {
		t.Fatalf("replace of a publishing run = %v, want it refused (ErrPublishing) with the reason", err)
	}
	if r, _ := led.Run(ctx, pub.ID); r.State != jobs.RunPublishing {
		t.Fatalf("run after the refused replace = %s, want publishing", r.State)
	}
	if err := led.FinishPublish(ctx, pub.ID, "w", jobs.RunSucceeded, ""); err != nil {
		t.Fatalf("the publish finishes after the refused replace: %v", err)
	}
	// A replace that finds the run succeeded meanwhile leaves it alone.
	if err := cancelForReplace(ctx, g, led, pub); err != nil {
		t.Fatalf("replace of a run that succeeded meanwhile = %v, want nil", err)
	}
	open := mk("open", "date=2")
	if err := cancelForReplace(ctx, g, led, open); err != nil {
		t.Fatalf("replace of a pending run: %v", err)
	}
	if r, _ := led.Run(ctx, open.ID); r.State != jobs.RunCancelled {
		t.Fatalf("pending run after replace = %s, want cancelled", r.State)
	}
}
