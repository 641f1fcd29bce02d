package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
)

// TestClusterBackfillRetryResumesKept: a 2-date cluster backfill with
// --parallel 1 into Parquet and a Postgres upsert table, one attempt per
// shard and no retries of transient errors. Its worker stops itself after
// the first date's first commit, the sink's server is stopped, the worker
// goes on: the first date's next shard fails for good (its run failed,
// its staged data kept for retry.keep_failed), and the second date is
// admitted but cannot run without its sink. With that worker gone,
// `precog retry BACKFILL` resumes the first date's run (same id; the
// output says so) and it waits behind the second date (1 in flight). With
// the server back and two workers of two claim loops each, the second
// date ends, then the first, never both executing at once; the shard
// committed before the failure is not executed again (same worker, same
// time), and both sinks hold exactly each date's rows. (Before, the retry
// gave the date a new run that recomputed every shard.)
func TestClusterBackfillRetryResumesKept(t *testing.T) {
	writeBackfillData(t)
	ledgerPG := testservers.Postgres(t)
	sink := testservers.NewPostgres(t)
	j := e2eJob{data: "backfill6", model: "ranker", rowsPerShard: 100, batch: 100}
	c := newE2ECluster(t, j, ledgerPG.DSN, sink.DSN, nil)
	c.table = "bf_kept"
	c.env = append(c.env, "TEST_TABLE="+c.table)
	c.spec = writeSpec(t, c.dir, "job.yaml", j.specBody()+
		"  postgres: { dsn: \"${TEST_SINK_DSN}\", table: \"${TEST_TABLE}\", mode: upsert }\n"+
		"retry: { max_attempts: 1, transient_window: 0s }\n")
	d1, d2 := backfillData.Dates[0], backfillData.Dates[1]
	r := c.precog("backfill", c.spec, "--from", d1, "--to", d2, "--parallel", "1", "--db", c.dsn)
	if r.code != 0 {
		t.Fatalf("backfill: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	b, runs, _ := c.backfillView(id)
	first, second := runs[d1], runs[d2]
	if len(b.Dates) != 2 || first.ID == "" || second.ID == "" {
		t.Fatalf("backfill %s: %+v", id, b)
	}

	env := c.env
	c.env = append(append([]string{}, env...), runner.EnvStopAfterCommits+"=1")
	w := c.worker("--parallel", "1")
	c.env = env
	c.waitFor("the worker to stop itself after its first commit", 2*time.Minute, func() bool {
		if w.exited() {
			t.Fatalf("the worker ended before its first commit:\n%s", w.log.String())
		}
		return processStopped(w.cmd.Process.Pid)
	})
	sink.Stop(t)
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.waitFor(d1+"'s run to fail", 2*time.Minute, func() bool { return c.run(first.ID).State.Terminal() })
	if got := c.run(first.ID); got.State != jobs.RunFailed {
		t.Fatalf("%s's run %s (%s), want failed", d1, got.State, got.Error)
	}
	before := c.shards(first.ID)
	if n := c.committed(first.ID); n != 1 {
		t.Fatalf("%s's failed run has %d committed shards, want 1", d1, n)
	}
	if _, err := c.led.PendingCleanup(context.Background(), first.ID); err != nil {
		t.Fatalf("%s's failed run keeps no staged data: %v", d1, err)
	}
	_ = w.cmd.Process.Kill()
	<-w.done

	rr := c.precog("retry", id, "--db", c.dsn)
	want := fmt.Sprintf("backfill %s: 1 value(s) retried\n  %s: resumed run %s (staged data kept: committed shards are not recomputed)\n", id, d1, first.ID)
	if rr.code != 0 || rr.stdout != want {
		t.Fatalf("retry %s: exit %d\n%s%s\nwant stdout:\n%s", id, rr.code, rr.stdout, rr.stderr, want)
	}
	if got := c.run(first.ID); got.State != jobs.RunRunning || got.Retries != 1 {
		t.Fatalf("%s's run after the retry: %s (retries %d), want running again", d1, got.State, got.Retries)
	}

	// Runs of the backfill executing a shard at once, read in one
	// statement (one snapshot) every 20ms until both dates end.
	conn, err := pgx.Connect(context.Background(), c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var most atomic.Int32
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			var n int32
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := conn.QueryRow(ctx, `SELECT count(DISTINCT br.run_id) FROM precog_backfill_runs br JOIN precog_run_shards s ON s.run_id = br.run_id
				WHERE br.backfill_id = $1 AND s.state = 'running'`, id).Scan(&n)
			cancel()
			if err == nil && n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	sink.Start(t)
	live := []*workerProc{c.worker("--parallel", "2"), c.worker("--parallel", "2")}
	for _, id := range []string{second.ID, first.ID} {
		if got := c.waitTerminal(id, 3*time.Minute); got.State != jobs.RunSucceeded {
			t.Fatalf("run %s: %s (%s)", id, got.State, got.Error)
		}
	}
	close(stop)
	<-watched
	if got := c.run(first.ID); !got.UpdatedAt.After(c.run(second.ID).UpdatedAt) {
		t.Errorf("%s's resumed run ended at %s, before %s's at %s: it ran past the bound", d1, got.UpdatedAt, d2, c.run(second.ID).UpdatedAt)
	}
	if n := most.Load(); n > 1 {
		t.Errorf("%d runs of the backfill executed shards at once, --parallel 1", n)
	} else {
		t.Logf("at most %d run of the backfill executing shards at once (--parallel 1; 4 claim loops)", n)
	}
	after := map[int]jobs.Shard{}
	for _, s := range c.shards(first.ID) {
		after[s.Index] = s
	}
	for _, s := range before {
		if s.State != jobs.ShardCommitted {
			continue
		}
		if a := after[s.Index]; a.Worker != s.Worker || !a.UpdatedAt.Equal(s.UpdatedAt) {
			t.Errorf("shard %d committed before the failure (by %s at %s) was executed again (by %s at %s)", s.Index, s.Worker, s.UpdatedAt, a.Worker, a.UpdatedAt)
		}
	}
	if b, _, _ := c.backfillView(id); len(b.Dates[0].Runs) != 1 || len(b.Dates[1].Runs) != 1 {
		t.Errorf("backfill dates after the retry: %+v, want one run each", b.Dates)
	}
	pgRows := c.backfillPostgres()
	for di, date := range []string{d1, d2} {
		want := backfillKeys(di)
		pq := readScores(t, filepath.Join(c.dir, "out", "scores", "date="+date))
		for name, got := range map[string]map[string]float32{"parquet": pq, "postgres": pgRows[date]} {
			if len(got) != len(want) {
				t.Errorf("%s %s: %d rows, want %d", name, date, len(got), len(want))
			}
			for k, s := range got {
				if !want[k] || s != pq[k] {
					t.Errorf("%s %s: key %s (score %v, parquet %v) is not the date's", name, date, k, s, pq[k])
					break
				}
			}
		}
	}
	stopWorkers(t, live...)
}
