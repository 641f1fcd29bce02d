package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

var _ sinks.Inventory = (*Sink)(nil)

// Stored implements sinks.Inventory for `precog gc`: the run tables
// (replace) or staging tables (upsert) of this sink's table that
// precog_objects registers to the job and that still exist under the
// registered oid. A table is Published when its version is recorded in
// precog_versions (behind the view, or retained for rollback). A user's
// table, even one named like a run table, is never listed: the registry is
// keyed by oid. In upsert mode the published rows live in {table} itself,
// which is not a version's and is not listed.
func (s *Sink) Stored(ctx context.Context, run sinks.RunInfo) ([]sinks.StoredVersion, error) {
	published, err := s.publishedVersions(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT r.run_version, c.relname::text, c.reltuples::bigint, pg_size_pretty(pg_total_relation_size(c.oid))
		FROM `+s.ident(tabObjects)+` r JOIN pg_class c ON c.oid = r.oid AND c.relname = r.name
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.schema
		WHERE r.schema = $1 AND r.job = $2 AND r.kind = $3
		ORDER BY r.created_at, r.run_version`, s.schema, s.job, kindRunTable)
	if err != nil {
		if missingTable(err) {
			return nil, nil // nothing was ever prepared in this schema
		}
		return nil, s.wrap("list run tables", err)
	}
	type entry struct {
		Version, Name string
		Tuples        int64
		Size          string
	}
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
	if err != nil {
		return nil, s.wrap("list run tables", err)
	}
	var out []sinks.StoredVersion
	for _, t := range tables {
		if t.Name != s.runTable(t.Version) {
			continue // another table's run table (the job had another sinks.postgres.table)
		}
		cur, isPublished := published[t.Version]
		kind := "run table"
		if s.spec.Mode == jobs.PostgresUpsert {
			kind = "staging table"
		}
		rowsDesc := "rows not counted yet"
		if t.Tuples >= 0 {
			rowsDesc = fmt.Sprintf("~%d rows", t.Tuples)
		}
		out = append(out, sinks.StoredVersion{Version: t.Version, Published: isPublished, Current: cur,
			What: fmt.Sprintf("%s %s.%s (%s, %s)", kind, s.schema, t.Name, rowsDesc, t.Size)})
	}
	return out, nil
}

// publishedVersions maps the versions precog_versions records for this
// table to whether each is current.
func (s *Sink) publishedVersions(ctx context.Context) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, "SELECT version, is_current FROM "+s.ident(tabVersions)+" WHERE table_name = $1", s.spec.Table)
	if err != nil {
		if missingTable(err) {
			return nil, nil
		}
		return nil, s.wrap("list published versions", err)
	}
	out := map[string]bool{}
	var v string
	var cur bool
	_, err = pgx.ForEachRow(rows, []any{&v, &cur}, func() error {
		out[v] = cur
		return nil
	})
	if err != nil {
		return nil, s.wrap("list published versions", err)
	}
	return out, nil
}

// isUndefinedTable reports a missing bookkeeping table (42P01).
func missingTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
