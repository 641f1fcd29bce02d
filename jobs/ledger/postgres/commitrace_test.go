package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestCommitWaitsForARunStateChange: a shard's commit that starts while
// another transaction is failing its run (the run's row updated, not yet
// committed) waits for it and is then refused: no shard commits into a
// run that failed (a worker's reject limit failing the run while its
// other claim loop commits, as the busy stability pass caught: the run
// failed with one committed shard and gained a second after). The wait is
// observed in pg_stat_activity, not timed.
func TestCommitWaitsForARunStateChange(t *testing.T) {
	ctx := context.Background()
	pg := testservers.Postgres(t)
	l := open(t, pg.DSN)
	defer l.Close()
	now := time.Now().UTC()
	r := jobs.Run{ID: "r1", Job: "recs", Version: "v", Pool: "default", State: jobs.RunPending, Shards: 1, CreatedAt: now, UpdatedAt: now}
	if err := l.CreateRun(ctx, r, []jobs.Shard{{RunID: r.ID, Index: 0, Plan: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	s, err := l.Claim(ctx, r.ID, "w", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE precog_runs SET state = 'failed', error = 'too many rejected rows' WHERE id = $1`, r.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w", Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}})
	}()
	waiting := false
	for deadline := time.Now().Add(time.Minute); !waiting; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the commit returned (%v) while the run's failure was still open: it did not wait for it", err)
		default:
		}
		if err := pg.Pool(t).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%precog_run_shards%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the commit neither returned nor waited on a lock within a minute")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ledger.ErrRunFinished) && !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("the commit after the run failed: %v, want refused (run finished)", err)
	}
	shards, err := l.Shards(ctx, r.ID)
	if err != nil || len(shards) != 1 || shards[0].State == jobs.ShardCommitted {
		t.Fatalf("shards after the refused commit: %+v, %v; want shard 0 not committed", shards, err)
	}
}
