package postgres

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// An analysts' read-only login role granted SELECT on the view keeps
// reading it through publishes (one of which changes the columns) and a
// rollback; the view's comment survives too.
func TestGrantsSurvivePublish(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	role := "precog_ro_" + pg.Database // roles are cluster-wide
	pg.Exec(t, "CREATE ROLE "+quote(role)+" LOGIN")
	t.Cleanup(func() {
		pg.Exec(t, "DROP OWNED BY "+quote(role))
		pg.Exec(t, "DROP ROLE "+quote(role))
	})
	u := url.URL{Scheme: "postgres", User: url.User(role), Host: fmt.Sprintf("%s:%d", pg.Host, pg.Port), Path: "/" + pg.Database, RawQuery: "sslmode=disable"}
	analyst, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer analyst.Close(ctx)
	readAs := func(step string, want int) {
		t.Helper()
		var n int
		// Simple protocol: no cached plan to invalidate when the columns change.
		if err := analyst.QueryRow(ctx, "SELECT count(*) FROM "+s.ident("preds"), pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			t.Fatalf("%s: the analyst cannot read the view: %v", step, err)
		}
		if n != want {
			t.Fatalf("%s: the analyst reads %d rows, want %d", step, n, want)
		}
	}
	runs := []struct {
		run  sinks.RunInfo
		rows int
	}{
		{sinktest.NewRun("v1", false, nil), 10},
		{sinktest.NewRun("v2", false, nil), 20}, // same columns: CREATE OR REPLACE
		{sinktest.NewRun("v3", true, nil), 30},  // string key: columns change
	}
	for i, r := range runs {
		if err := s.Prepare(ctx, r.run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, r.run, 0, 0, r.rows, true)
		publish(t, s, r.run)
		if i == 0 {
			pg.Exec(t, "GRANT USAGE ON SCHEMA "+quote(s.schema)+" TO "+quote(role))
			pg.Exec(t, "GRANT SELECT ON "+s.ident("preds")+" TO "+quote(role))
			pg.Exec(t, "COMMENT ON VIEW "+s.ident("preds")+" IS 'user predictions; ask #ml'")
		}
		readAs("publish "+r.run.Version, r.rows)
	}
	if err := s.Rollback(ctx, runs[1].run, "v2"); err != nil { // columns change back
		t.Fatal(err)
	}
	readAs("rollback to v2", 20)
	var comment string
	if err := s.pool.QueryRow(ctx, "SELECT obj_description(to_regclass($1), 'pg_class')", s.ident("preds")).Scan(&comment); err != nil || comment != "user predictions; ask #ml" {
		t.Fatalf("view comment = %q, %v", comment, err)
	}
	// The analyst may read, not write: no privilege was widened.
	var insert, grantOpt bool
	if err := s.pool.QueryRow(ctx, "SELECT has_table_privilege($1, $2, 'INSERT'), has_table_privilege($1, $2, 'SELECT WITH GRANT OPTION')",
		role, s.ident("preds")).Scan(&insert, &grantOpt); err != nil || insert || grantOpt {
		t.Fatalf("analyst privileges: insert %v, grant option %v, %v", insert, grantOpt, err)
	}
}
