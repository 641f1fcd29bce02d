package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func wantNotOwned(t *testing.T, what string, err error) {
	t.Helper()
	var ne *sinks.NotOwnedError
	if !errors.As(err, &ne) || ne.Hint == "" {
		t.Fatalf("%s = %v, want a *sinks.NotOwnedError with a hint", what, err)
	}
}

// count runs a count query.
func count(t *testing.T, s *Sink, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A table or view named {table} that precog did not create is refused by
// Check (which writes nothing) and Prepare, and left as it was.
func TestUserObjectRefused(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	for _, c := range []struct {
		mode   jobs.PostgresMode
		create string
	}{
		{ModeReplace, "CREATE TABLE %s (user_id bigint, note text)"},
		{ModeReplace, "CREATE VIEW %s AS SELECT 1::bigint AS user_id, 'mine'::text AS note"},
		{ModeUpsert, "CREATE TABLE %s (user_id bigint, note text)"},
	} {
		s := newSink(t, pg, c.mode, "preds")
		defer s.Close()
		pg.Exec(t, "CREATE SCHEMA "+quote(s.schema))
		pg.Exec(t, sprintf(c.create, s.ident("preds")))
		if c.create[7] == 'T' {
			pg.Exec(t, "INSERT INTO "+s.ident("preds")+" VALUES (1, 'mine')")
		}
		wantNotOwned(t, "Check", s.Check(ctx))
		if n := count(t, s, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1", s.schema); n != 1 {
			t.Fatalf("%s: Check left %d relations in the schema, want only the user's", c.mode, n)
		}
		run := sinktest.NewRun("v1", false, nil)
		wantNotOwned(t, "Prepare", s.Prepare(ctx, run))
		if n := count(t, s, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1", s.schema); n != 1 {
			t.Fatalf("%s: Prepare created %d relations next to the user's", c.mode, n-1)
		}
		if err := s.Abort(ctx, run); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		if n := count(t, s, "SELECT count(*) FROM "+s.ident("preds")+" WHERE note = 'mine'"); n != 1 {
			t.Fatalf("%s: the user's rows are gone", c.mode)
		}
	}
}

func sprintf(f, a string) string { return fmt.Sprintf(f, a) }

// A view precog created, dropped and recreated by a user under the same
// name, is no longer precog's (the registry is keyed by oid); another job
// may not take over precog's view either; and a user table named like a
// run table is refused by Prepare and left alone by Abort.
func TestRecreatedAndForeignObjects(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	run := sinktest.NewRun("v1", false, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 10, true)
	publish(t, s, run)

	other, err := New(ctx, "another-job", s.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	wantNotOwned(t, "Check by another job", other.Check(ctx))
	wantNotOwned(t, "Prepare by another job", other.Prepare(ctx, sinktest.NewRun("v2", false, nil)))

	// A user table named like the next run's table.
	pg.Exec(t, "CREATE TABLE "+s.ident(s.runTable("v2"))+" (x int)")
	pg.Exec(t, "INSERT INTO "+s.ident(s.runTable("v2"))+" VALUES (42)")
	run2 := sinktest.NewRun("v2", false, nil)
	wantNotOwned(t, "Prepare over a user's run-table name", s.Prepare(ctx, run2))
	if err := s.Abort(ctx, run2); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if n := count(t, s, "SELECT count(*) FROM "+s.ident(s.runTable("v2"))+" WHERE x = 42"); n != 1 {
		t.Fatal("Abort dropped a user's table")
	}

	pg.Exec(t, "DROP VIEW "+s.ident("preds"))
	pg.Exec(t, "CREATE VIEW "+s.ident("preds")+" AS SELECT 7 AS mine")
	wantNotOwned(t, "Check after the user recreated the view", s.Check(ctx))
	run3 := sinktest.NewRun("v3", false, nil)
	wantNotOwned(t, "Prepare after the user recreated the view", s.Prepare(ctx, run3))
	if n := count(t, s, "SELECT count(*) FROM "+s.ident("preds")+" WHERE mine = 7"); n != 1 {
		t.Fatal("the user's view changed")
	}
}

// Retention drops old run tables only when they are precog's: a table a
// user put in place of one stays.
func TestRetentionSparesUserTable(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds") // retain 2
	defer s.Close()
	ctx := context.Background()
	for i, v := range []string{"v1", "v2", "v3"} {
		run := sinktest.NewRun(v, false, nil)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, run, 0, 0, 5, true)
		publish(t, s, run)
		if i == 1 { // v1 is no longer the view's: a user replaces its table
			pg.Exec(t, "DROP TABLE "+s.ident(s.runTable("v1")))
			pg.Exec(t, "CREATE TABLE "+s.ident(s.runTable("v1"))+" (x int)")
			pg.Exec(t, "INSERT INTO "+s.ident(s.runTable("v1"))+" VALUES (1)")
		}
	}
	if n := count(t, s, "SELECT count(*) FROM "+s.ident(s.runTable("v1"))); n != 1 {
		t.Fatalf("user table holds %d rows", n)
	}
	vs, err := s.Versions(ctx, sinks.RunInfo{})
	if err != nil || len(vs) != 2 || vs[0] != "v3" {
		t.Fatalf("Versions = %v, %v; want [v3 v2]", vs, err)
	}
	// v2's table, precog's, goes at the next publish.
	run := sinktest.NewRun("v4", false, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 5, true)
	publish(t, s, run)
	if n := count(t, s, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2", s.schema, s.runTable("v2")); n != 0 {
		t.Fatal("retention kept precog's run table v2")
	}
}

// A schema written by a precog without the registry is adopted: its view
// and run tables stay precog's.
func TestLegacySchemaAdopted(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	run := sinktest.NewRun("v1", false, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 5, true)
	publish(t, s, run)
	pg.Exec(t, "DROP TABLE "+s.ident(tabObjects)) // as an older precog left it
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check of a legacy schema: %v", err)
	}
	run2 := sinktest.NewRun("v2", false, nil)
	if err := s.Prepare(ctx, run2); err != nil {
		t.Fatalf("Prepare of a legacy schema: %v", err)
	}
	writeRows(t, s, run2, 0, 0, 5, true)
	publish(t, s, run2)
	if n := count(t, s, "SELECT count(*) FROM "+s.ident(tabObjects)+" WHERE job = $1", testJob); n != 3 {
		t.Fatalf("registry holds %d objects, want the view and two run tables", n)
	}
}

// TestFrozenSessionReleasesView: a sink session that sits idle inside a
// transaction holding the view's lock (a publisher frozen by SIGSTOP or cut
// off by a partition, mid-cutover) is ended by the server, so a reader
// with a 15s statement_timeout gets its rows instead of being cancelled.
func TestFrozenSessionReleasesView(t *testing.T) {
	old := idleInTxTimeout
	idleInTxTimeout = time.Second
	t.Cleanup(func() { idleInTxTimeout = old })
	ctx := context.Background()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "frozen")
	defer s.Close()
	run := sinktest.NewRun("v1", false, map[string]string{"date": "2024-11-01"})
	publishRows(t, s, run, 10)

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+s.ident("frozen")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// The "publisher" now freezes: it sends nothing more.
	reader, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	if _, err := reader.Exec(ctx, "SET statement_timeout = '15s'"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRow(ctx, "SELECT count(*) FROM "+s.ident("frozen")).Scan(&n); err != nil {
		t.Fatalf("reader behind a frozen sink session: %v (the session kept the view's lock)", err)
	}
	if n != 10 {
		t.Fatalf("reader saw %d rows, want 10", n)
	}
	_ = tx.Rollback(ctx)
}

// TestPublishLockWaitBounded: a cutover that waits for the view's lock
// behind a long reader gives up after ddlLockTimeout (55P03, transient),
// instead of queueing every new reader behind it until the reader ends.
func TestPublishLockWaitBounded(t *testing.T) {
	old := ddlLockTimeout
	ddlLockTimeout = 200 * time.Millisecond
	t.Cleanup(func() { ddlLockTimeout = old })
	ctx := context.Background()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "busy")
	defer s.Close()
	run1 := sinktest.NewRun("v1", false, map[string]string{"date": "2024-11-01"})
	publishRows(t, s, run1, 5)
	run2 := sinktest.NewRun("v2", false, map[string]string{"date": "2024-11-01"})
	stageRows(t, s, run2, 7)

	reader, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	rtx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback(ctx)
	var n int
	if err := rtx.QueryRow(ctx, "SELECT count(*) FROM "+s.ident("busy")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = s.Publish(pctx, run2)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("Publish behind a reader holding the view = %v, want lock_not_available (55P03)", err)
	}
	if retry.Classify(err) != retry.Transient {
		t.Fatalf("a lock timeout is not retried: %v", err)
	}
	_ = rtx.Rollback(ctx)
	if err := s.Publish(ctx, run2); err != nil {
		t.Fatalf("Publish once the reader is gone: %v", err)
	}
}

// stageRows prepares run, writes n rows as one shard and stages it.
func stageRows(t *testing.T, s *Sink, run sinks.RunInfo, n int) {
	t.Helper()
	ctx := context.Background()
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatalf("Prepare(%s): %v", run.Version, err)
	}
	writeRows(t, s, run, 0, 0, n, true)
	if err := s.Stage(ctx, run, commits.committed(s, run)); err != nil {
		t.Fatalf("Stage(%s): %v", run.Version, err)
	}
}

// publishRows stages n rows of run and publishes them.
func publishRows(t *testing.T, s *Sink, run sinks.RunInfo, n int) {
	t.Helper()
	stageRows(t, s, run, n)
	if err := s.Publish(context.Background(), run); err != nil {
		t.Fatalf("Publish(%s): %v", run.Version, err)
	}
}
