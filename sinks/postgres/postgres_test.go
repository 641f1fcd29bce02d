package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var schemaSeq atomic.Int64

// testJob owns the sinks' objects; it is sinktest.NewRun's job.
const testJob = "sinktest"

// newSink returns a sink writing into a fresh schema of pg's database.
// The sink's modes, for the tests' newSink.
const (
	ModeReplace = jobs.PostgresReplace
	ModeUpsert  = jobs.PostgresUpsert
)

func newSink(t testing.TB, pg *testservers.PG, mode jobs.PostgresMode, table string) *Sink {
	t.Helper()
	s, err := New(context.Background(), testJob, jobs.PostgresSinkSpec{
		DSN:    pg.DSN,
		Table:  table,
		Schema: fmt.Sprintf("sink_%d", schemaSeq.Add(1)),
		Mode:   mode,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// readSnapshot is what a reader of the view sees: the current version and
// the rows, read in one statement so that both come from one snapshot.
//
// A publish that changes a column's type makes pgx's cached statement fail
// once with "cached plan must not change result type" (SQLSTATE 0A000);
// pgx then drops the statement, so one retry reads the new view. Readers
// of the view (the lookup API) should do the same.
func readSnapshot(ctx context.Context, sk sinks.Sink, run sinks.RunInfo) (sinktest.Snapshot, error) {
	snap, err := readSnapshotOnce(ctx, sk, run)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "0A000" {
		snap, err = readSnapshotOnce(ctx, sk, run)
	}
	return snap, err
}

func readSnapshotOnce(ctx context.Context, sk sinks.Sink, run sinks.RunInfo) (sinktest.Snapshot, error) {
	s := sk.(*Sink)
	sql := "SELECT v.version, t.* FROM (SELECT version FROM " + s.ident("precog_versions") +
		" WHERE table_name = $1 AND is_current) v LEFT JOIN " + s.ident(s.spec.Table) + " t ON true"
	rows, err := s.pool.Query(ctx, sql, s.spec.Table)
	if err != nil {
		return sinktest.Snapshot{}, err
	}
	defer rows.Close()
	snap := sinktest.Snapshot{Rows: map[string]sinktest.Row{}}
	fds := rows.FieldDescriptions()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return snap, err
		}
		snap.Version = vals[0].(string)
		if vals[1] == nil { // the LEFT JOIN's empty side: no rows
			continue
		}
		row := sinktest.Row{}
		for i := 1; i < len(vals); i++ {
			name := fds[i].Name
			idx := run.Schema.FieldIndices(name)
			if idx == nil {
				return snap, fmt.Errorf("view has column %q not in the run's schema", name)
			}
			v, err := sinktest.Canon(run.Schema.Field(idx[0]).Type, vals[i])
			if err != nil {
				return snap, fmt.Errorf("column %q: %w", name, err)
			}
			row[name] = v
		}
		snap.Records++
		snap.Rows[fmt.Sprint(row[run.Key])] = row
	}
	if err := rows.Err(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			return sinktest.Snapshot{Rows: map[string]sinktest.Row{}}, nil // nothing published yet
		}
		return snap, err
	}
	return snap, nil
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

func TestConformance(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	sinktest.Exercise(t, sinktest.Harness{
		New: func(t *testing.T) sinks.Sink { return newSink(t, pg, ModeReplace, "preds") },
		Read: func(ctx context.Context, s sinks.Sink, run sinks.RunInfo) (sinktest.Snapshot, error) {
			snap, err := readSnapshot(ctx, s, run)
			if isUndefinedTable(err) {
				return sinktest.Snapshot{Rows: map[string]sinktest.Row{}}, nil
			}
			return snap, err
		},
		LoseShard: func(ctx context.Context, sk sinks.Sink, run sinks.RunInfo, index int) error {
			s := sk.(*Sink)
			_, err := s.pool.Exec(ctx, "DELETE FROM "+s.ident(s.runTable(run.Version))+" WHERE "+quote(colShard)+" = $1", index)
			return err
		},
	})
}

// upsertRows reads the upsert table's rows of one date, by key.
func upsertRows(t *testing.T, s *Sink, run sinks.RunInfo, date string) map[string]sinktest.Row {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), "SELECT * FROM "+s.ident(s.spec.Table)+" WHERE date = $1", date)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]sinktest.Row{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		row := sinktest.Row{}
		for i, fd := range rows.FieldDescriptions() {
			if fd.Name == colVersion {
				continue
			}
			f, _ := run.Schema.FieldsByName(fd.Name)
			v, err := sinktest.Canon(f[0].Type, vals[i])
			if err != nil {
				t.Fatalf("column %s: %v", fd.Name, err)
			}
			row[fd.Name] = v
		}
		k := fmt.Sprint(row[run.Key])
		if _, dup := out[k]; dup {
			t.Fatalf("key %s twice for date %s", k, date)
		}
		out[k] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeRows(t *testing.T, s *Sink, run sinks.RunInfo, shard, from, to int, commit bool) {
	t.Helper()
	ctx := context.Background()
	w, err := s.Shard(ctx, run, shard)
	if err != nil {
		t.Fatalf("Shard: %v", err)
	}
	b := sinktest.Batch(run, from, to)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !commit {
		if err := w.Abort(ctx); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		return
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	commits.record(s, run, shard, int64(to-from))
}

// ledger stands in for the runner's ledger: the rows of each committed
// shard per sink and version, what publish hands to Stage.
type ledger struct {
	mu   sync.Mutex
	rows map[*Sink]map[string]map[int]int64
}

var commits = ledger{rows: map[*Sink]map[string]map[int]int64{}}

func (l *ledger) record(s *Sink, run sinks.RunInfo, shard int, rows int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rows[s] == nil {
		l.rows[s] = map[string]map[int]int64{}
	}
	if l.rows[s][run.Version] == nil {
		l.rows[s][run.Version] = map[int]int64{}
	}
	l.rows[s][run.Version][shard] = rows
}

func (l *ledger) committed(s *Sink, run sinks.RunInfo) []sinks.CommittedShard {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sinks.CommittedShard
	for i, n := range l.rows[s][run.Version] {
		out = append(out, sinks.CommittedShard{Index: i, Rows: n})
	}
	slices.SortFunc(out, func(a, b sinks.CommittedShard) int { return a.Index - b.Index })
	return out
}

// publish stages run with the shards writeRows committed, then publishes.
func publish(t *testing.T, s *Sink, run sinks.RunInfo) {
	t.Helper()
	ctx := context.Background()
	if err := s.Stage(ctx, run, commits.committed(s, run)); err != nil {
		t.Fatalf("Stage(%s): %v", run.Version, err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatalf("Publish(%s): %v", run.Version, err)
	}
}

// Upsert: retried shards and re-runs leave one row per (date, key); a re-run
// of a date replaces that date's rows (vanished keys included) and nothing
// else.
func TestUpsertIdempotent(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeUpsert, "scores")
	defer s.Close()
	ctx := context.Background()
	d1, d2 := map[string]string{"date": "2024-11-01"}, map[string]string{"date": "2024-11-02"}

	run1 := sinktest.NewRun("v1", false, d1)
	if err := s.Prepare(ctx, run1); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run1, 0, 0, 60, false) // aborted attempt
	writeRows(t, s, run1, 0, 0, 60, true)
	writeRows(t, s, run1, 0, 0, 60, true) // committed twice
	writeRows(t, s, run1, 1, 60, 100, true)
	publish(t, s, run1)
	run2 := sinktest.NewRun("v2", false, d2)
	if err := s.Prepare(ctx, run2); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run2, 0, 0, 50, true)
	publish(t, s, run2)
	if diff := diff(upsertRows(t, s, run1, "2024-11-01"), sinktest.Want(run1, 0, 100)); diff != "" {
		t.Fatalf("date 1 after run 1: %s", diff)
	}

	// Re-run date 1 with another key set: keys 0..19 vanish.
	run3 := sinktest.NewRun("v3", false, d1)
	if err := s.Prepare(ctx, run3); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run3, 0, 20, 100, true)
	publish(t, s, run3)
	if diff := diff(upsertRows(t, s, run3, "2024-11-01"), sinktest.Want(run3, 20, 100)); diff != "" {
		t.Fatalf("date 1 after re-run: %s", diff)
	}
	if diff := diff(upsertRows(t, s, run2, "2024-11-02"), sinktest.Want(run2, 0, 50)); diff != "" {
		t.Fatalf("date 2 changed by a re-run of date 1: %s", diff)
	}
	if err := s.Rollback(ctx, run3, "v1"); err == nil {
		t.Fatal("Rollback in upsert mode succeeded")
	}
}

// diff compares rows by key on the fields of want.
func diff(got, want map[string]sinktest.Row) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d rows, want %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			return fmt.Sprintf("key %s missing", k)
		}
		for f, wv := range w {
			if fmt.Sprint(g[f]) != fmt.Sprint(wv) {
				return fmt.Sprintf("key %s field %s = %v, want %v", k, f, g[f], wv)
			}
		}
	}
	return ""
}

// Identifiers from a spec are quoted, never spliced: a table, schema and
// columns with quotes, spaces and semicolons work and inject nothing.
func TestWeirdIdentifiers(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	s, err := New(ctx, testJob, jobs.PostgresSinkSpec{
		DSN: pg.DSN, Table: `preds"; DROP TABLE victim; --`, Schema: `My "Schema"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pg.Exec(t, "CREATE TABLE victim (x int)")
	run := sinktest.NewRun("v1; DROP TABLE victim", true, map[string]string{"date": "2024-11-01"})
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 10, true)
	publish(t, s, run)
	snap, err := readSnapshot(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != run.Version || len(snap.Rows) != 10 {
		t.Fatalf("read version %q with %d rows", snap.Version, len(snap.Rows))
	}
	pg.Exec(t, "SELECT * FROM victim") // still there

	for _, bad := range []string{"", string(make([]byte, 64)), "a\x00b"} {
		if _, err := New(ctx, testJob, jobs.PostgresSinkSpec{DSN: pg.DSN, Table: bad}); err == nil {
			t.Errorf("table %q accepted", bad)
		}
	}
	if _, err := New(ctx, testJob, jobs.PostgresSinkSpec{DSN: pg.DSN, Table: "t", Mode: "merge"}); err == nil {
		t.Error("mode merge accepted")
	}
}

// A long version still names a run table within 63 bytes, distinct per
// version.
func TestLongVersion(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "a_rather_long_table_name_for_predictions_of_users")
	defer s.Close()
	ctx := context.Background()
	for _, v := range []string{"2024-11-01T00:00:00Z-abcdef123456", "2024-11-01T00:00:00Z-abcdef123457"} {
		if rt := s.runTable(v); len(rt) > 63 {
			t.Fatalf("run table %q is %d bytes", rt, len(rt))
		}
		run := sinktest.NewRun(v, false, nil)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, run, 0, 0, 5, true)
		publish(t, s, run)
	}
	vs, err := s.Versions(ctx, sinks.RunInfo{})
	if err != nil || len(vs) != 2 {
		t.Fatalf("Versions = %v, %v", vs, err)
	}
}

// Retention keeps the newest Retain published run tables and drops the rest.
func TestRetention(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	for _, v := range []string{"v1", "v2", "v3", "v4"} {
		run := sinktest.NewRun(v, false, nil)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, run, 0, 0, 5, true)
		publish(t, s, run)
	}
	vs, err := s.Versions(ctx, sinks.RunInfo{})
	if err != nil || fmt.Sprint(vs) != "[v4 v3]" {
		t.Fatalf("Versions = %v, %v; want [v4 v3]", vs, err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'preds\\_\\_%'", s.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d run tables remain, want 2", n)
	}
	if err := s.Rollback(ctx, sinks.RunInfo{}, "v1"); err == nil {
		t.Fatal("Rollback to a dropped version succeeded")
	}
}

// The view follows a column type change between runs (CREATE OR REPLACE
// VIEW could not).
func TestTypeChange(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	run1 := sinktest.NewRun("v1", false, nil)
	run2 := sinktest.NewRun("v2", true, nil) // string key: user_key text
	for _, run := range []sinks.RunInfo{run1, run2} {
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, run, 0, 0, 5, true)
		publish(t, s, run)
	}
	snap, err := readSnapshot(ctx, s, run2)
	if err != nil || snap.Version != "v2" || len(snap.Rows) != 5 {
		t.Fatalf("after type change: %q %d rows, %v", snap.Version, len(snap.Rows), err)
	}
	if err := s.Rollback(ctx, run2, "v1"); err != nil {
		t.Fatal(err)
	}
	snap, err = readSnapshot(ctx, s, run1)
	if err != nil || snap.Version != "v1" || len(snap.Rows) != 5 {
		t.Fatalf("after rollback: %q %d rows, %v", snap.Version, len(snap.Rows), err)
	}
}

// An unreachable server is sinks.ErrUnreachable, and the error does not
// carry the password.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	s, err := New(context.Background(), testJob, jobs.PostgresSinkSpec{
		DSN: "postgres://precog:s3cretpw@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", Table: "preds",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Prepare(context.Background(), sinktest.NewRun("v1", false, nil))
	if !errors.Is(err, sinks.ErrUnreachable) {
		t.Fatalf("Prepare: %v, want ErrUnreachable", err)
	}
	if strings.Contains(err.Error(), "s3cretpw") {
		t.Fatalf("error shows the password: %v", err)
	}
	if _, err := New(context.Background(), testJob, jobs.PostgresSinkSpec{DSN: "postgres://u:s3cretpw@h:notaport/db", Table: "t"}); err == nil || strings.Contains(err.Error(), "s3cretpw") {
		t.Fatalf("bad DSN: %v", err)
	}
}

// A connection killed mid-shard fails the attempt; the retry stores the
// shard exactly once.
func TestKilledConnectionRetry(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	run := sinktest.NewRun("v1", false, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 100, true)
	w, err := s.Shard(ctx, run, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Batch(run, 100, 150)
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Release()
	pid := w.(*shardWriter).conn.Conn().PgConn().PID()
	pg.Exec(t, "SELECT pg_terminate_backend($1)", pid)
	b = sinktest.Batch(run, 150, 200)
	err = w.Write(ctx, b)
	b.Release()
	if err == nil {
		err = w.Commit(ctx)
	} else {
		_ = w.Abort(ctx)
	}
	if err == nil {
		t.Fatal("attempt on a killed connection committed")
	}
	writeRows(t, s, run, 1, 100, 200, true)
	writeRows(t, s, run, 0, 0, 100, true) // and a committed shard redone
	publish(t, s, run)
	snap, err := readSnapshot(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Records != 200 || diff(snap.Rows, sinktest.Want(run, 0, 200)) != "" {
		t.Fatalf("%d records: %s", snap.Records, diff(snap.Rows, sinktest.Want(run, 0, 200)))
	}
}
