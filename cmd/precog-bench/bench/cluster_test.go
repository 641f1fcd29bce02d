package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
)

func TestMain(m *testing.M) { testservers.Main(m) }

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{ms(5, 1, 3, 2, 4), 0.5, 3 * time.Millisecond},
		{ms(5, 1, 3, 2, 4), 0.99, 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(7), 0.99, 7 * time.Millisecond},
		{nil, 0.5, 0},
	} {
		if got := quantile(c.in, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.in, c.q, got, c.want)
		}
	}
}

// TestClaimCycles: every cycle the loop counts is a shard committed in the
// ledger, and running out of shards ends the loop before its duration.
func TestClaimCycles(t *testing.T) {
	pg := testservers.Postgres(t)
	ctx := context.Background()
	led, err := pgledger.Open(ctx, pg.DSN, pgledger.Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	const perRun = 40
	t0 := time.Now()
	st, err := claimCycles(ctx, led, "captest", 4, perRun, time.Minute)
	rate, n := st.rate, st.n
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 30*time.Second {
		t.Errorf("the loop ran %s: it did not stop when the shards ran out", took)
	}
	if n != capacityRuns*perRun || rate <= 0 {
		t.Errorf("claimCycles = %v cycles/s, %d cycles; want %d cycles", rate, n, capacityRuns*perRun)
	}
	if st.claim <= 0 || st.heartbeat <= 0 || st.complete <= 0 {
		t.Errorf("claimCycles latencies = %+v, want each call timed", st)
	}
	var committed int64
	if err := pg.Pool(t).QueryRow(ctx, `SELECT count(*) FROM precog_run_shards WHERE state = 'committed' AND rows_in = 1`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed != n {
		t.Errorf("%d shards committed in the ledger, the loop counted %d", committed, n)
	}
}

// TestRawStatements: the raw loop runs the statement it is given, with the
// goroutine's index as $1.
func TestRawStatements(t *testing.T) {
	pg := testservers.Postgres(t)
	ctx := context.Background()
	rate, err := rawStatements(ctx, pg.DSN, `UPDATE bench_raw SET n = n + 1 WHERE id = $1`, 3, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var rows, touched, total int64
	if err := pg.Pool(t).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n > 0), sum(n) FROM bench_raw`).Scan(&rows, &touched, &total); err != nil {
		t.Fatal(err)
	}
	if rows != 3 || touched != 3 || rate <= 0 || float64(total) < rate*0.3*0.5 {
		t.Errorf("rate %v/s; bench_raw: %d rows, %d updated, %d updates in all", rate, rows, touched, total)
	}
	if _, err := rawStatements(ctx, pg.DSN, `SELECT no_such_column FROM bench_raw`, 2, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no_such_column") {
		t.Errorf("a failing statement: err = %v", err)
	}
}

func TestNotifyLatency(t *testing.T) {
	pg := testservers.Postgres(t)
	ds, err := notifyLatency(context.Background(), pg.DSN, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Fatalf("%d latencies, want 5", len(ds))
	}
	for _, d := range ds {
		if d <= 0 || d > 5*time.Second {
			t.Errorf("latency %v", d)
		}
	}
}

// TestWriteSpecWith: the options reach the spec; the defaults are one
// shard per file and the runtime's threads.
func TestWriteSpecWith(t *testing.T) {
	h := &harness{cfg: config{work: t.TempDir()}, models: t.TempDir()}
	sink := "  parquet: { path: \"" + filepath.Join(h.cfg.work, "out") + "\" }\n"
	for _, c := range []struct {
		o       specOptions
		rows    int64
		threads int
	}{
		{specOptions{}, rowsPerFile, 0},
		{specOptions{RowsPerShard: 50_000, Threads: 1}, 50_000, 1},
	} {
		p, err := h.writeSpecWith("spec-test", "heavy", filepath.Join(h.cfg.work, "data"), map[string]string{"score": "score"}, sink, c.o)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := jobs.Load(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Source.RowsPerShard != c.rows || spec.Model.Threads != c.threads {
			t.Errorf("%+v: rows_per_shard %d, threads %d; want %d, %d", c.o, spec.Source.RowsPerShard, spec.Model.Threads, c.rows, c.threads)
		}
	}
}
