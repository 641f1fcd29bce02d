package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// backfillData is the cluster backfill test's dataset: 6 dates of 800
// rows each, every date its own keys (Disjoint), so that a sink holding
// one date's rows under another date shows.
var (
	backfillData = testgen.Dataset{Seed: 13, StringKeys: true, Disjoint: true,
		Dates:        []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05", "2026-11-06"},
		FilesPerDate: 2, RowsPerFile: 400, RowsPerGroup: 100}
	backfillDataOnce sync.Once
	backfillDataErr  error
)

// writeBackfillData writes backfillData into the fixtures (once).
func writeBackfillData(t *testing.T) {
	t.Helper()
	backfillDataOnce.Do(func() {
		_, backfillDataErr = testgen.WriteDataset(filepath.Join(fixtures, "data", "backfill6"), backfillData)
	})
	if backfillDataErr != nil {
		t.Fatal(backfillDataErr)
	}
}

// backfillKeys is the set of keys of date index di of backfillData.
func backfillKeys(di int) map[string]bool {
	keys := map[string]bool{}
	for f := range backfillData.FilesPerDate {
		first, n := backfillData.Keys(di, f)
		for k := first; k < first+n; k++ {
			keys[testgen.KeyString(k)] = true
		}
	}
	return keys
}

// backfillSinks are the sinks of the cluster backfill job: a Parquet
// directory, a Postgres upsert table keyed by date and a Redis namespace,
// each templated per date.
const backfillSinks = `  postgres: { dsn: "${TEST_SINK_DSN}", table: "${TEST_TABLE}", mode: upsert }
  redis: { addr: "${TEST_REDIS_ADDR}", db: "${TEST_REDIS_DB}", namespace: "${TEST_NS}-{{.date}}" }
`

// backfillView is the ledger's view of a backfill: each value's current
// run, and how many of them are started and not ended (in flight).
func (c *e2eCluster) backfillView(id string) (ledger.Backfill, map[string]jobs.Run, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := c.led.Backfill(ctx, id)
	if err != nil {
		return b, nil, 0
	}
	runs := map[string]jobs.Run{}
	inFlight := 0
	for _, d := range b.Dates {
		r, err := c.led.Run(ctx, d.Run())
		if err != nil {
			return b, nil, 0
		}
		runs[d.Value] = r
		if r.State == jobs.RunRunning || r.State == jobs.RunPublishing {
			inFlight++
		}
	}
	return b, runs, inFlight
}

// TestClusterBackfill: a 6-date backfill with --db, --parallel 3 and two
// real workers. runs --backfill lists its 6 runs; the ledger never has more
// than 3 of them in flight; one date is cancelled mid-run (precog cancel
// RUN) while the others finish; retry ID completes it; and every sink
// (Parquet, Postgres upsert, Redis namespace per date) holds exactly each
// date's rows, with the same score in every sink.
func TestClusterBackfill(t *testing.T) {
	writeBackfillData(t)
	pg := testservers.Postgres(t)
	rdb := testservers.Redis(t)
	j := e2eJob{data: "backfill6", model: "heavy", rowsPerShard: 100, batch: 4}
	c := newE2ECluster(t, j, pg.DSN, pg.DSN, rdb)
	c.table = "bf_scores_" + strings.ToLower(rdb.Prefix)
	c.env = append(c.env, "TEST_TABLE="+c.table)
	c.spec = writeSpec(t, c.dir, "job.yaml", j.specBody()+backfillSinks)
	dates := backfillData.Dates

	r := c.precog("backfill", c.spec, "--from", dates[0], "--to", dates[len(dates)-1], "--parallel", "3", "--db", c.dsn)
	if r.code != 0 {
		t.Fatalf("backfill: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	listRuns := func() []struct{ ID, State, Backfill string } {
		t.Helper()
		r := c.precog("runs", "--backfill", id, "--json", "--db", c.dsn)
		var list []struct{ ID, State, Backfill string }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil {
			t.Fatalf("runs --backfill %s --json: exit %d\n%s%s", id, r.code, r.stdout, r.stderr)
		}
		return list
	}
	if list := listRuns(); len(list) != len(dates) {
		t.Fatalf("runs --backfill --json lists %d runs, want %d: %+v", len(list), len(dates), list)
	}

	// The bound, read from the ledger every 20ms from before the workers
	// start until the backfill ends, in one statement (one snapshot): run
	// by run, a run read running just before it ended and the run admitted
	// in its place read running just after count as two.
	inFlight, err := pgx.Connect(context.Background(), c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Close(context.Background())
	var maxInFlight atomic.Int32
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			var n int32
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := inFlight.QueryRow(ctx, `SELECT count(*) FROM precog_backfill_runs br JOIN precog_runs r ON r.id = br.run_id
				WHERE br.backfill_id = $1 AND r.state IN ('running', 'publishing')`, id).Scan(&n)
			cancel()
			if err == nil && n > maxInFlight.Load() {
				maxInFlight.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-watched }()

	live := []*workerProc{c.worker(), c.worker()}
	// A date mid-run: some shards committed, some not, read with the pool
	// frozen so that it cannot finish between the choice and the cancel.
	var victim jobs.Run
	var victimDate string
	c.waitFor("a date's run mid-run", 2*time.Minute, func() bool {
		_, runs, _ := c.backfillView(id)
		mid := false
		for _, r := range runs {
			if n := c.committed(r.ID); r.State == jobs.RunRunning && n > 0 && n < len(c.shards(r.ID)) {
				mid = true
			}
		}
		if !mid {
			return false
		}
		for _, w := range live {
			_ = w.cmd.Process.Signal(syscall.SIGSTOP)
		}
		_, runs, _ = c.backfillView(id)
		for v, r := range runs {
			if n := c.committed(r.ID); r.State == jobs.RunRunning && n > 0 && n < len(c.shards(r.ID)) {
				victim, victimDate = r, v
				return true
			}
		}
		c.thaw(live)
		return false
	})
	// The cancel marks the run first, then waits for the workers' leases
	// and cleans the sinks, where a frozen worker's open sink transaction
	// would hold it up: the pool thaws once the ledger says cancelled.
	cw := c.start(nil, "cancel", victim.ID, "--db", c.dsn)
	c.waitFor("the ledger to mark "+victim.ID+" cancelled", time.Minute, func() bool {
		return c.run(victim.ID).State == jobs.RunCancelled || cw.exited()
	})
	c.thaw(live)
	if code := cw.wait(t, 2*time.Minute); code != 0 || !strings.Contains(cw.log.String(), "run "+victim.ID+" cancelled") {
		t.Fatalf("cancel %s: exit %d\n%s", victim.ID, code, cw.log.String())
	}
	t.Logf("cancelled %s (%s) with %d of %d shards committed", victimDate, victim.ID, c.committed(victim.ID), len(c.shards(victim.ID)))

	// The others finish; the cancelled one stays cancelled.
	c.waitFor("every other date to end", 3*time.Minute, func() bool {
		_, runs, _ := c.backfillView(id)
		if len(runs) != len(dates) {
			return false
		}
		for _, r := range runs {
			if !r.State.Terminal() {
				return false
			}
		}
		return true
	})
	_, runs, _ := c.backfillView(id)
	for v, r := range runs {
		want := jobs.RunSucceeded
		if v == victimDate {
			want = jobs.RunCancelled
		}
		if r.State != want {
			t.Errorf("%s: run %s %s (%s), want %s", v, r.ID, r.State, r.Error, want)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(c.dir, "out", "scores", "date="+victimDate, "*.parquet")); len(files) > 0 {
		t.Errorf("the cancelled date %s published Parquet files: %v", victimDate, files)
	}
	if got := c.backfillPostgres()[victimDate]; len(got) > 0 {
		t.Errorf("the cancelled date %s has %d rows in Postgres", victimDate, len(got))
	}

	rr := c.precog("retry", id, "--db", c.dsn)
	if rr.code != 0 || !strings.Contains(rr.stdout, victimDate) {
		t.Fatalf("retry %s: exit %d\n%s%s", id, rr.code, rr.stdout, rr.stderr)
	}
	c.waitFor("the retried date to end", 2*time.Minute, func() bool {
		_, runs, _ := c.backfillView(id)
		r, ok := runs[victimDate]
		return ok && r.ID != victim.ID && r.State.Terminal()
	})
	if _, runs, _ := c.backfillView(id); runs[victimDate].State != jobs.RunSucceeded {
		t.Fatalf("retried %s: %s (%s)", victimDate, runs[victimDate].State, runs[victimDate].Error)
	}
	if list := listRuns(); len(list) != len(dates)+1 {
		t.Errorf("after the retry runs --backfill lists %d runs, want %d (6 and the retry)", len(list), len(dates)+1)
	}
	st := c.precog("status", id, "--json", "--db", c.dsn)
	var view struct{ State string }
	if st.code != 0 || json.Unmarshal([]byte(st.stdout), &view) != nil || view.State != "succeeded" {
		t.Errorf("status %s --json after the retry: exit %d\n%s%s", id, st.code, st.stdout, st.stderr)
	}
	if n := maxInFlight.Load(); n > 3 {
		t.Errorf("the ledger had %d runs of the backfill in flight at once, --parallel 3", n)
	} else {
		t.Logf("at most %d runs of the backfill in flight at once (--parallel 3)", n)
	}

	pgRows := c.backfillPostgres()
	for di, date := range dates {
		want := backfillKeys(di)
		pq := readScores(t, filepath.Join(c.dir, "out", "scores", "date="+date))
		rd := c.redisNamespace(c.ns + "-" + date)
		for sink, got := range map[string]map[string]float32{"parquet": pq, "postgres": pgRows[date], "redis": rd} {
			if len(got) != len(want) {
				t.Errorf("%s %s: %d rows, want %d", sink, date, len(got), len(want))
			}
			for k, s := range got {
				if !want[k] {
					t.Errorf("%s %s: key %s is not the date's", sink, date, k)
					break
				}
				if s != pq[k] {
					t.Errorf("%s %s: key %s scores %v, parquet %v", sink, date, k, s, pq[k])
					break
				}
			}
		}
	}
	stopWorkers(t, live...)
}

// backfillPostgres reads the upsert table: date → key → score; it fails
// the test on a duplicate (date, key).
func (c *e2eCluster) backfillPostgres() map[string]map[string]float32 {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.sinkDSN)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	out := map[string]map[string]float32{}
	rows, err := conn.Query(ctx, "SELECT date, user_id, score FROM "+pgx.Identifier{c.table}.Sanitize())
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return out
		}
		c.t.Fatalf("postgres sink table %s: %v", c.table, err)
	}
	for rows.Next() {
		var d, k string
		var s float32
		if err := rows.Scan(&d, &k, &s); err != nil {
			c.t.Fatal(err)
		}
		if out[d] == nil {
			out[d] = map[string]float32{}
		}
		if _, dup := out[d][k]; dup {
			c.t.Errorf("postgres %s: duplicate key %s on %s", c.table, k, d)
		}
		out[d][k] = s
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// redisNamespace reads the current version of a Redis namespace: key →
// score (nil when the namespace has no current version).
func (c *e2eCluster) redisNamespace(ns string) map[string]float32 {
	c.t.Helper()
	ctx := context.Background()
	rc := c.rdb.Client(c.t)
	cur, err := rc.Get(ctx, ns+":current").Result()
	if err != nil {
		c.t.Errorf("redis %s:current: %v", ns, err)
		return nil
	}
	prefix := ns + ":" + cur + ":"
	out := map[string]float32{}
	iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if _, seen := out[strings.TrimPrefix(k, prefix)]; seen {
			continue // SCAN may return a key twice
		}
		v, err := rc.Get(ctx, k).Bytes()
		if err != nil {
			c.t.Fatalf("redis get %s: %v", k, err)
		}
		var rec struct {
			Score *float32 `json:"score"`
		}
		if err := json.Unmarshal(v, &rec); err != nil || rec.Score == nil {
			c.t.Fatalf("redis %s: %q is no record with a score: %v", k, v, err)
		}
		out[strings.TrimPrefix(k, prefix)] = *rec.Score
	}
	if err := iter.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}
