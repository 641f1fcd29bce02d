package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/parquet"
)

// These end-to-end tests check that control commands respect the publish
// (docs/guarantees.md): cancel, retry and rollback never leave the stores
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
	if _, err := runner.AbortSinks(ctx, run, runner.AbortOptions{}); err != nil {
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
	// Versions order to the second (sinks.CheckPublishOrder): c's must be
	// a later second than b's.
	bSecond := c.run(b).CreatedAt.Truncate(time.Second)
	c.waitFor("the clock to pass b's second", 2*time.Second, func() bool { return time.Now().Truncate(time.Second).After(bSecond) })
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
		_, _, err := c.led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "default", Worker: "pub", Lease: time.Minute})
		if err != nil {
			break
		}
	}
	for _, s := range c.shards(d) {
		if err := c.led.Complete(ctx, ledger.CompleteParams{RunID: d, Shard: s.Index, Worker: "pub", Counts: jobs.Counts{}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: d, Worker: "pub", Lease: time.Minute}); err != nil {
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
	if err := c.led.FinishPublish(ctx, ledger.FinishPublishParams{RunID: d, Worker: "pub", State: jobs.RunFailed, Msg: "test"}); err != nil {
		t.Fatal(err)
	}
	// A writer holding a store's lock (a publisher between stage and
	// cutover) makes rollback refuse too, changing nothing.
	c.setEnvOf()
	spec, err := loadSpec(c.spec, []string{"date=" + e2eDate})
	if err != nil {
		t.Fatal(err)
	}
	snks, err := runner.OpenSinks(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var redisSink sinks.Sink
	for _, s := range snks {
		defer s.Close()
		if s.Name() == "redis" {
			redisSink = s
		}
	}
	info := sinks.RunInfo{Job: spec.Name, Params: spec.Params}
	lk, err := redisSink.Lock(ctx, info, sinks.Holder{Job: spec.Name, RunID: "another-writer", Host: "elsewhere", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	r = c.precog("rollback", c.spec, "--param", "date="+e2eDate, "--db", c.dsn)
	if r.code == 0 || !strings.Contains(r.stderr, "another-writer") {
		t.Fatalf("rollback while another writer holds the redis lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.storesOn(versionOf(cc))
	if err := lk.Release(ctx); err != nil {
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
	if err := led.Complete(ctx, ledger.CompleteParams{RunID: pub.ID, Shard: 0, Worker: "w", Counts: jobs.Counts{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: pub.ID, Worker: "w", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	replace := runner.Scheduled{Ledger: led, Logger: g.log}
	err := replace.Cancel(ctx, pub)
	if !errors.Is(err, ledger.ErrPublishing) || !strings.Contains(err.Error(), "replace waits") {
		t.Fatalf("replace of a publishing run = %v, want it refused (ErrPublishing) with the reason", err)
	}
	if r, _ := led.Run(ctx, pub.ID); r.State != jobs.RunPublishing {
		t.Fatalf("run after the refused replace = %s, want publishing", r.State)
	}
	if err := led.FinishPublish(ctx, ledger.FinishPublishParams{RunID: pub.ID, Worker: "w", State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatalf("the publish finishes after the refused replace: %v", err)
	}
	// A replace that finds the run succeeded meanwhile leaves it alone.
	if err := replace.Cancel(ctx, pub); err != nil {
		t.Fatalf("replace of a run that succeeded meanwhile = %v, want nil", err)
	}
	open := mk("open", "date=2")
	if err := replace.Cancel(ctx, open); err != nil {
		t.Fatalf("replace of a pending run: %v", err)
	}
	if r, _ := led.Run(ctx, open.ID); r.State != jobs.RunCancelled {
		t.Fatalf("pending run after replace = %s, want cancelled", r.State)
	}
}

// latencyProxy forwards TCP connections to target, delaying every chunk
// by a fixed latency in each direction (order kept), as a slow network
// between a process and its store would.
type latencyProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	mu     sync.Mutex
	conns  []net.Conn
}

func newLatencyProxy(t *testing.T, target string, delay time.Duration) *latencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &latencyProxy{ln: ln, target: target, delay: delay}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *latencyProxy) addr() string { return p.ln.Addr().String() }

func (p *latencyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pump(up, c)
			p.pump(c, up)
		}()
	}
}

// pump copies src to dst, each chunk delivered p.delay after it was read.
func (p *latencyProxy) pump(dst, src net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now(), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at.Add(p.delay)))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func (p *latencyProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// storeVersions is what each store names now: Redis current, the Postgres
// view's version and the Parquet output's marker ("" when none).
func (c *e2eCluster) storeVersions() (redis, pg, pq string) {
	c.t.Helper()
	ctx := context.Background()
	redis, _ = c.rdb.Client(c.t).Get(ctx, c.ns+":current").Result()
	conn, err := pgx.Connect(ctx, c.sinkDSN)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	_ = conn.QueryRow(ctx, `SELECT version FROM precog_versions WHERE table_name = $1 AND is_current`, c.table).Scan(&pg)
	if m, err := parquet.ReadMarker(filepath.Join(c.dir, "out", "scores", "date="+e2eDate)); err == nil {
		pq = m.Version
	}
	return redis, pg, pq
}

// TestClusterChaosControl: three workers reach the ledger and Redis
// through 25ms-latency proxies while runs are submitted and, at random
// moments, cancelled, rolled back and retried (forced or not), all at
// once. After each round (every run ended): Redis, Postgres and Parquet
// name the same succeeded version (rollback moves all three), the latest
// succeeded one unless a rollback succeeded since; no store names a
// cancelled or failed run. A last undisturbed run then brings all three to
// its version.
func TestClusterChaosControl(t *testing.T) {
	j := e2eQuick
	pgsrv := testservers.Postgres(t)
	rdb := testservers.Redis(t)
	u, err := url.Parse(pgsrv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	ledProxy := newLatencyProxy(t, u.Host, 25*time.Millisecond)
	redisProxy := newLatencyProxy(t, rdb.Addr, 25*time.Millisecond)
	pu := *u
	pu.Host = ledProxy.addr()
	dsn := pu.String()
	c := newE2ECluster(t, j, dsn, pgsrv.DSN, rdb)
	for i, kv := range c.env {
		if strings.HasPrefix(kv, "TEST_REDIS_ADDR=") {
			c.env[i] = "TEST_REDIS_ADDR=" + redisProxy.addr()
		}
	}
	ctx := context.Background()
	ws := []*workerProc{c.worker(), c.worker(), c.worker()}
	rng := rand.New(rand.NewPCG(17, uint64(time.Now().UnixNano())))
	jitter := func() { time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond) }
	states := func() map[string]jobs.Run {
		runs, err := c.led.Runs(ctx, "scores", 0)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]jobs.Run{}
		for _, r := range runs {
			m[r.Version] = r
		}
		return m
	}
	// The latest succeeded run is the last created (versions order by
	// their second; within one, runs publish in the order they ran).
	latestSucceeded := func(m map[string]jobs.Run) string {
		var last jobs.Run
		for _, r := range m {
			if r.State == jobs.RunSucceeded && r.CreatedAt.After(last.CreatedAt) {
				last = r
			}
		}
		return last.Version
	}
	var ended []string // runs that ended failed or cancelled: retry candidates
	rolledBack := false
	before := states()
	for round := range 5 {
		id := c.submit()
		var retryID string
		if len(ended) > 0 {
			retryID = ended[rng.IntN(len(ended))]
		}
		force := rng.IntN(2) == 0
		var wg sync.WaitGroup
		var cancelRes, rollbackRes, retryRes result
		wg.Add(3)
		go func() { defer wg.Done(); jitter(); cancelRes = c.precog("cancel", id, "--db", dsn, "--drain", "20s") }()
		go func() {
			defer wg.Done()
			jitter()
			rollbackRes = c.precog("rollback", c.spec, "--param", "date="+e2eDate, "--db", dsn)
		}()
		go func() {
			defer wg.Done()
			if retryID == "" {
				return
			}
			jitter()
			args := []string{"retry", retryID, "--db", dsn}
			if force {
				args = append(args, "--force")
			}
			retryRes = c.precog(args...)
		}()
		wg.Wait()
		c.waitFor("every run to end", 3*time.Minute, func() bool {
			for _, r := range states() {
				if !r.State.Terminal() {
					return false
				}
			}
			return true
		})
		after := states()
		succeeded := false
		for v, r := range after {
			if r.State == jobs.RunSucceeded && before[v].State != jobs.RunSucceeded {
				succeeded = true
			}
		}
		switch {
		case rollbackRes.code == 0:
			rolledBack = true
		case succeeded:
			rolledBack = false
		}
		rv, pv, qv := c.storeVersions()
		latest := latestSucceeded(after)
		t.Logf("round %d: run %s %s (cancel exit %d), rollback exit %d, retry %s exit %d; stores redis %s postgres %s parquet %s; latest succeeded %s",
			round, id, after[c.run(id).Version].State, cancelRes.code, rollbackRes.code, retryID, retryRes.code, rv, pv, qv, latest)
		if rv != pv || rv != qv {
			t.Errorf("round %d: redis names %q, postgres %q, parquet %q", round, rv, pv, qv)
		}
		if r, ok := after[rv]; rv != "" && (!ok || r.State != jobs.RunSucceeded) {
			t.Errorf("round %d: redis and postgres name %q, a run that is %s", round, rv, r.State)
		}
		if !rolledBack && rv != latest {
			t.Errorf("round %d: the stores are on %q, with no rollback since the latest success %q", round, rv, latest)
		}
		for _, r := range after {
			if (r.State == jobs.RunFailed || r.State == jobs.RunCancelled) && !slices.Contains(ended, r.ID) {
				ended = append(ended, r.ID)
			}
		}
		before = after
	}
	// An undisturbed run brings every store to its version.
	id := c.submit()
	if r := c.waitTerminal(id, 3*time.Minute); r.State != jobs.RunSucceeded {
		t.Fatalf("final run %s: %s %s", id, r.State, r.Error)
	}
	final := c.run(id).Version
	if latest := latestSucceeded(states()); latest != final {
		t.Errorf("the final run %s is not the latest succeeded (%s)", final, latest)
	}
	c.storesOn(final)
	stopWorkers(t, ws...)
}
