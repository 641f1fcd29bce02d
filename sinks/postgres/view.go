package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// colDef is a column as the catalog shows it.
type colDef struct{ Name, Type string }

// relColumns lists name's columns in order with their SQL types, hidden
// columns excluded.
func (s *Sink) relColumns(ctx context.Context, tx pgx.Tx, name string) ([]colDef, error) {
	rows, err := tx.Query(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, s.ident(name))
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", name, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowToStructByPos[colDef])
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", name, err)
	}
	return slices.DeleteFunc(cols, func(c colDef) bool { return c.Name == colShard || c.Name == colVersion }), nil
}

// pointView makes the view {table} show run table rt, in the caller's
// transaction (atomic for readers). When the old view's columns are a
// prefix of the new ones (same names and types), CREATE OR REPLACE VIEW
// keeps the view itself, and with it its grants, owner, comment and
// dependent objects. Otherwise the view is dropped and created anew, and
// the old view's owner, grants and comment are re-applied.
func (s *Sink) pointView(ctx context.Context, tx pgx.Tx, rt string) error {
	cols, err := s.relColumns(ctx, tx, rt)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		return fmt.Errorf("run table %s is missing", rt)
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = quote(c.Name)
	}
	body := " AS SELECT " + strings.Join(names, ", ") + " FROM " + s.ident(rt)
	view, err := s.owned(ctx, tx, s.spec.Table)
	if err != nil {
		return err
	}
	if !view.exists {
		if _, err := tx.Exec(ctx, "CREATE VIEW "+s.ident(s.spec.Table)+body); err != nil {
			return fmt.Errorf("create view %s over %s: %w", s.spec.Table, rt, err)
		}
		return s.register(ctx, tx, s.spec.Table, kindView, "")
	}
	if view.relkind != "v" {
		return fmt.Errorf("%s exists and is not a view", s.spec.Table)
	}
	old, err := s.relColumns(ctx, tx, s.spec.Table)
	if err != nil {
		return err
	}
	if len(old) <= len(cols) && slices.Equal(old, cols[:len(old)]) {
		if _, err := tx.Exec(ctx, "CREATE OR REPLACE VIEW "+s.ident(s.spec.Table)+body); err != nil {
			return fmt.Errorf("replace view %s over %s: %w", s.spec.Table, rt, err)
		}
		return nil
	}
	restore, err := s.viewMeta(ctx, tx, view.oid)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "DROP VIEW "+s.ident(s.spec.Table)); err != nil {
		return fmt.Errorf("drop view %s (its columns change; a dependent view must be dropped first): %w", s.spec.Table, err)
	}
	if err := s.unregister(ctx, tx, view.oid); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "CREATE VIEW "+s.ident(s.spec.Table)+body); err != nil {
		return fmt.Errorf("create view %s over %s: %w", s.spec.Table, rt, err)
	}
	if err := s.register(ctx, tx, s.spec.Table, kindView, ""); err != nil {
		return err
	}
	for _, stmt := range restore {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("re-apply %q to view %s: %w", stmt, s.spec.Table, err)
		}
	}
	return nil
}

// viewMeta returns the statements that give a recreated view the old
// view's owner (when not the current user), grants and comment, built by
// the server (quote_ident, %L) from pg_class.relacl and pg_description.
func (s *Sink) viewMeta(ctx context.Context, tx pgx.Tx, oid uint32) ([]string, error) {
	var stmts []string
	err := tx.QueryRow(ctx, `SELECT array_remove(ARRAY[
			CASE WHEN c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
				THEN format('ALTER VIEW %s OWNER TO %I', $2::text, pg_get_userbyid(c.relowner)) END,
			CASE WHEN obj_description(c.oid, 'pg_class') IS NOT NULL
				THEN format('COMMENT ON VIEW %s IS %L', $2::text, obj_description(c.oid, 'pg_class')) END
		], NULL) || COALESCE((SELECT array_agg(format('GRANT %s ON %s TO %s%s', a.privilege_type, $2::text,
				CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
				CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END) ORDER BY a.grantee, a.privilege_type)
			FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner), '{}')
		FROM pg_class c WHERE c.oid = $1`, oid, s.ident(s.spec.Table)).Scan(&stmts)
	if err != nil {
		return nil, fmt.Errorf("read grants of view %s: %w", s.spec.Table, err)
	}
	return stmts, nil
}
