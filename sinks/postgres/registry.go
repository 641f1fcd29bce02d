package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/sinks"
)

// Kinds of objects recorded in precog_objects.
const (
	kindView     = "view"      // {table} in replace mode
	kindRunTable = "run_table" // {table}__{version}: a run's rows (replace) or staged rows (upsert)
	kindTable    = "table"     // {table} in upsert mode
)

// Bookkeeping table names (in the sink's schema). Job specs cannot name a
// table precog_*, so these never collide with a target.
const (
	tabVersions = "precog_versions"
	tabShards   = "precog_shards"
	tabObjects  = "precog_objects"
	tabLocks    = "precog_locks"
)

// querier is what lookups need: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// object is what the catalog and the registry say about one name.
type object struct {
	exists  bool
	oid     uint32
	relkind string // pg_class.relkind
	// job that created it, "" when precog did not (or the registry has no
	// row for this oid: the object was dropped and recreated by someone else).
	job string
}

// ours reports whether the object exists and precog created it for job.
func (o object) ours(job string) bool { return o.exists && o.job == job }

// lookup reads name's catalog entry and its registry row. It writes
// nothing, so Check can use it. The registry is keyed by oid: a same-named
// object that someone dropped and recreated is not precog's.
func (s *Sink) lookup(ctx context.Context, q querier, name string) (object, error) {
	var hasReg, hasVersions bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		s.ident(tabObjects), s.ident(tabVersions)).Scan(&hasReg, &hasVersions); err != nil {
		return object{}, fmt.Errorf("look up %s: %w", name, err)
	}
	var o object
	var sql string
	switch {
	case hasReg:
		sql = `SELECT c.oid, c.relkind::text, COALESCE(r.job, '') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN ` + s.ident(tabObjects) + ` r ON r.oid = c.oid AND r.name = c.relname AND r.schema = n.nspname
			WHERE n.nspname = $1 AND c.relname = $2`
	case hasVersions:
		// A schema written before the registry existed: precog_versions
		// names what precog created (adopted into the registry by Prepare).
		sql = `SELECT c.oid, c.relkind::text, COALESCE((SELECT v.job FROM ` + s.ident(tabVersions) + ` v
				WHERE v.table_name = c.relname OR v.run_table = c.relname ORDER BY v.published_at DESC LIMIT 1), '')
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`
	default:
		sql = `SELECT c.oid, c.relkind::text, '' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`
	}
	err := q.QueryRow(ctx, sql, s.schema, name).Scan(&o.oid, &o.relkind, &o.job)
	if errors.Is(err, pgx.ErrNoRows) {
		return object{}, nil
	}
	if err != nil {
		return object{}, fmt.Errorf("look up %s: %w", name, err)
	}
	o.exists = true
	return o, nil
}

// notOwned is the error for an object precog will not touch.
func (s *Sink) notOwned(name string, o object) error {
	hint := fmt.Sprintf("choose another sinks.postgres.table (or schema), or drop or rename %s.%s if it is no longer needed", s.schema, name)
	if o.job != "" {
		hint = fmt.Sprintf("it belongs to job %q; give this job its own sinks.postgres.table", o.job)
	}
	return &sinks.NotOwnedError{Sink: "postgres", Target: s.schema + "." + name, Hint: hint}
}

// owned returns name's object when it is absent or precog's for this job,
// and a *sinks.NotOwnedError otherwise.
func (s *Sink) owned(ctx context.Context, q querier, name string) (object, error) {
	o, err := s.lookup(ctx, q, name)
	if err != nil {
		return o, err
	}
	if o.exists && !o.ours(s.job) {
		return o, s.notOwned(name, o)
	}
	return o, nil
}

// createBookkeeping creates the schema and precog's own tables when
// missing, adopting the objects a pre-registry precog recorded in
// precog_versions the first time the registry is created.
func (s *Sink) createBookkeeping(ctx context.Context, tx pgx.Tx) error {
	if err := s.createSchema(ctx, tx); err != nil {
		return err
	}
	var hasReg bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.ident(tabObjects)).Scan(&hasReg); err != nil {
		return err
	}
	if hasReg {
		return nil
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + s.ident(tabVersions) + ` (
			table_name   text NOT NULL,
			version      text NOT NULL,
			job          text NOT NULL,
			run_id       text NOT NULL,
			run_table    text NOT NULL,
			mode         text NOT NULL,
			published_at timestamptz NOT NULL DEFAULT now(),
			is_current   boolean NOT NULL DEFAULT false,
			PRIMARY KEY (table_name, version))`,
		`CREATE TABLE IF NOT EXISTS ` + s.ident(tabShards) + ` (
			run_table text NOT NULL,
			shard     integer NOT NULL,
			commits   integer NOT NULL,
			PRIMARY KEY (run_table, shard))`,
		`CREATE TABLE ` + s.ident(tabObjects) + ` (
			oid         oid PRIMARY KEY,
			schema      text NOT NULL,
			name        text NOT NULL,
			kind        text NOT NULL,
			job         text NOT NULL,
			run_version text NOT NULL,
			created_at  timestamptz NOT NULL DEFAULT now())`,
		// Adopt what precog created before the registry existed.
		`INSERT INTO ` + s.ident(tabObjects) + ` (oid, schema, name, kind, job, run_version)
		SELECT DISTINCT ON (c.oid) c.oid, n.nspname, c.relname,
			CASE WHEN c.relname = v.run_table AND v.run_table <> v.table_name THEN '` + kindRunTable + `'
			     WHEN c.relkind = 'v' THEN '` + kindView + `' ELSE '` + kindTable + `' END, v.job, v.version
		FROM ` + s.ident(tabVersions) + ` v JOIN pg_class c ON c.relname IN (v.table_name, v.run_table)
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $1
		ORDER BY c.oid, v.published_at DESC`,
	}
	for i, q := range stmts {
		var args []any
		if i == len(stmts)-1 {
			args = []any{s.schema} // the adoption query
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("create bookkeeping tables: %w", err)
		}
	}
	return nil
}

// createSchema creates the sink's schema unless it exists (CREATE SCHEMA IF
// NOT EXISTS would need the CREATE privilege on the database even then).
func (s *Sink) createSchema(ctx context.Context, tx pgx.Tx) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", s.schema).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(s.schema)); err != nil {
		return fmt.Errorf("create schema %s: %w", s.schema, err)
	}
	return nil
}

// register records that precog created name (just now, in tx).
func (s *Sink) register(ctx context.Context, tx pgx.Tx, name, kind, version string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.ident(tabObjects)+` (oid, schema, name, kind, job, run_version)
		SELECT c.oid, n.nspname, c.relname, $3, $4, $5 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2
		ON CONFLICT (oid) DO UPDATE SET schema = EXCLUDED.schema, name = EXCLUDED.name, kind = EXCLUDED.kind,
			job = EXCLUDED.job, run_version = EXCLUDED.run_version, created_at = now()`,
		s.schema, name, kind, s.job, version)
	if err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	return nil
}

// unregister forgets a dropped object.
func (s *Sink) unregister(ctx context.Context, tx pgx.Tx, oid uint32) error {
	if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident(tabObjects)+" WHERE oid = $1", oid); err != nil {
		return fmt.Errorf("unregister oid %d: %w", oid, err)
	}
	return nil
}

// createOwned creates name with ddl and registers it, unless it exists
// already as precog's for this job; anything else by that name is a
// *sinks.NotOwnedError.
func (s *Sink) createOwned(ctx context.Context, tx pgx.Tx, name, kind, version, ddl string) error {
	o, err := s.owned(ctx, tx, name)
	if err != nil || o.exists {
		return err
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	return s.register(ctx, tx, name, kind, version)
}

// dropOwned drops the table name when it is precog's for this job and
// forgets it; another object by that name is left alone (reported by
// the return value) and a missing one is fine.
func (s *Sink) dropOwned(ctx context.Context, tx pgx.Tx, name string) (untouched bool, err error) {
	o, err := s.lookup(ctx, tx, name)
	if err != nil || !o.exists {
		return false, err
	}
	if !o.ours(s.job) {
		s.log.Warn("not dropping a table precog did not create", "object", s.schema+"."+name)
		return true, nil
	}
	if _, err := tx.Exec(ctx, "DROP TABLE "+s.ident(name)); err != nil {
		return false, fmt.Errorf("drop %s: %w", name, err)
	}
	return false, s.unregister(ctx, tx, o.oid)
}
