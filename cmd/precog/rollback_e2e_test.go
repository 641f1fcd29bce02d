package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
)

// TestRollbackMovesEverySink: two runs of one job (two models, so their
// scores differ) publish into Redis, Postgres and Parquet; precog rollback
// brings all three back to the first run's version with its exact content
// (the Parquet files byte for byte). Then, with the Parquet sink keeping
// only the current version (retain: 1), rollback refuses with exit 2
// naming it and changes nothing, and --sinks redis,postgres moves only
// those two. On the old code rollback left Parquet on the newer version.
func TestRollbackMovesEverySink(t *testing.T) {
	jA := e2eQuick
	jB := e2eJob{model: "heavy", rowsPerShard: 500, batch: 64, pgSink: true, redisSink: true}
	c := newE2ECluster(t, jA, testservers.Postgres(t).DSN, testservers.Postgres(t).DSN, testservers.Redis(t))
	specB := writeSpec(t, c.dir, "job-b.yaml", jB.specBody())
	const pqPath = `path: "out/scores/date={{.date}}" }`
	if !strings.Contains(jB.specBody(), pqPath) {
		t.Fatal("the spec's parquet sink is not where this test looks for it")
	}
	specC := writeSpec(t, c.dir, "job-c.yaml", strings.Replace(jB.specBody(), pqPath, `path: "out/scores/date={{.date}}", retain: 1 }`, 1))
	var last time.Time
	run := func(spec string) string {
		t.Helper()
		// Versions order by their second: each run starts in a later one.
		c.waitFor("the clock to pass the last run's second", 2*time.Second, func() bool { return time.Now().Truncate(time.Second).After(last) })
		last = time.Now().Truncate(time.Second)
		if r := c.precog("run", spec, "--param", "date="+e2eDate, "--no-progress"); r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s%s", spec, r.code, r.stdout, r.stderr)
		}
		rv, pv, qv := c.storeVersions()
		if rv == "" || rv != pv || rv != qv {
			t.Fatalf("after run %s: redis %q postgres %q parquet %q", spec, rv, pv, qv)
		}
		return rv
	}
	vA := run(c.spec)
	oA := c.outputs(jA)
	vB := run(specB)
	oB := c.outputs(jB)
	if maps.Equal(oA.parquet, oB.parquet) {
		t.Fatal("the two runs scored alike: the test could not tell them apart")
	}

	r := c.precog("rollback", specB, "--param", "date="+e2eDate)
	if r.code != 0 {
		t.Fatalf("rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("rollback:\n%s", r.stdout)
	for _, sink := range []string{"parquet", "postgres", "redis"} {
		if !strings.Contains(r.stdout, sink+": "+vB+" → "+vA) {
			t.Errorf("rollback did not say it moved %s from %s to %s:\n%s", sink, vB, vA, r.stdout)
		}
	}
	c.storesOn(vA)
	got := c.outputs(jA)
	sameScores(t, "parquet", got.parquet, oA.parquet)
	sameScores(t, "postgres", got.pg, oA.pg)
	sameScores(t, "redis", got.redis, oA.redis)
	if !maps.Equal(got.parquetFiles, oA.parquetFiles) {
		t.Errorf("parquet files after rollback differ from the first run's:\ngot  %v\nwant %v", got.parquetFiles, oA.parquetFiles)
	}

	// Parquet keeps only the current version now: a rollback would split.
	vC := run(specC)
	oC := c.outputs(jB)
	r = c.precog("rollback", specC, "--param", "date="+e2eDate)
	if r.code != 2 || !strings.Contains(r.stderr, "sinks.parquet") || !strings.Contains(r.stderr, "not retained") || !strings.Contains(r.stderr, "nothing was changed") {
		t.Fatalf("rollback with parquet keeping no earlier version: exit %d, want 2 naming sinks.parquet\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.storesOn(vC)
	if got := c.outputs(jB); !maps.Equal(got.parquetFiles, oC.parquetFiles) {
		t.Errorf("the refused rollback changed the parquet files")
	}
	r = c.precog("rollback", specC, "--param", "date="+e2eDate, "--sinks", "redis,postgres")
	if r.code != 0 || !strings.Contains(r.stdout, "parquet: left as it is") {
		t.Fatalf("rollback --sinks redis,postgres: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if rv, pv, qv := c.storeVersions(); rv != vB || pv != vB || qv != vC {
		t.Errorf("after rollback --sinks redis,postgres: redis %s postgres %s parquet %s; want %s %s %s", rv, pv, qv, vB, vB, vC)
	}
	got = c.outputs(jB)
	sameScores(t, "postgres", got.pg, oB.pg)
	sameScores(t, "redis", got.redis, oB.redis)
	if !maps.Equal(got.parquetFiles, oC.parquetFiles) {
		t.Errorf("rollback --sinks redis,postgres changed the parquet files")
	}
}
