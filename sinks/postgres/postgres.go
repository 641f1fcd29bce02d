// Package postgres is the Postgres sink: predictions in a table analysts
// query and the lookup API falls back to (contract 2 of DESIGN.md).
//
// # mode: replace (default)
//
// Each run writes into its own run table {table}__{version} (shortened with a
// hash where that exceeds Postgres' 63 bytes). Readers query the view
// {table}, which Publish re-points at the new run table in one transaction
// (DROP VIEW + CREATE VIEW: atomic for readers, and unlike CREATE OR REPLACE
// VIEW it allows column types to change between runs). A reader sees the old
// run until the commit, then the new one, never a mix. The key index is
// built after the load, before the switch. Run tables beyond Retain are
// dropped at Publish; Rollback points the view back at a retained one.
//
// Run tables carry a hidden _shard column the view does not expose. Each
// shard attempt is one transaction: it locks the shard's row in
// precog_shards, deletes the rows an earlier committed attempt left (only
// when there was one, so a first attempt never scans), and streams its rows
// with a binary COPY encoded straight from the Arrow columns. A retried
// shard thus replaces its own rows exactly; an attempt that never commits
// leaves nothing.
//
// # mode: upsert
//
// {table} is a real table with primary key (run params…, key) and a
// _precog_version column. Each shard COPYs into a temporary table and merges
// it with INSERT … ON CONFLICT DO UPDATE in one transaction, so a retried
// shard or a re-run overwrites rows in place. Publish deletes the rows of the
// same params that the run did not rewrite, so re-running a date replaces
// that date's rows and nothing else. Rows are visible as each shard commits
// (there is no atomic cutover in this mode), Abort cannot undo them, and
// there is no version to roll back to.
//
// # Bookkeeping
//
// precog_versions (in the sink's schema) records each published version:
// table, version, job, run id, run table, published_at and whether it is
// current. precog_shards counts committed attempts per run table and shard.
// DDL runs under a transaction-scoped advisory lock per table, so several
// workers may Prepare and Publish concurrently.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Modes of the sink.
const (
	ModeReplace = "replace"
	ModeUpsert  = "upsert"
)

// Hidden column names.
const (
	colShard   = "_shard"
	colVersion = "_precog_version"
)

// Sink writes a run's records to Postgres. It is safe for concurrent use by
// the shard writers of one process.
type Sink struct {
	spec   jobs.PostgresSinkSpec
	pool   *pgxpool.Pool
	schema string
	vector map[string]bool
	log    *slog.Logger

	mu     sync.Mutex
	active map[string]*shardWriter // in-flight attempt per version/shard
	// hasVector caches whether the pgvector extension is installed.
	hasVector *bool
}

var (
	_ sinks.Sink       = (*Sink)(nil)
	_ sinks.Rollbacker = (*Sink)(nil)
)

// New validates spec and returns a sink. It does not connect: Prepare checks
// reachability, so a spec can be validated offline.
func New(ctx context.Context, spec jobs.PostgresSinkSpec) (*Sink, error) {
	if spec.Schema == "" {
		spec.Schema = "public"
	}
	switch spec.Mode {
	case "":
		spec.Mode = ModeReplace
	case ModeReplace, ModeUpsert:
	default:
		return nil, fmt.Errorf("sinks.postgres.mode: %q is not replace or upsert", spec.Mode)
	}
	if spec.Retain == 0 {
		spec.Retain = 2
	}
	if spec.Retain < 1 {
		return nil, fmt.Errorf("sinks.postgres.retain: %d, want at least 1", spec.Retain)
	}
	if spec.DSN == "" {
		return nil, errors.New("sinks.postgres.dsn: empty")
	}
	if err := checkIdent(spec.Table); err != nil {
		return nil, fmt.Errorf("sinks.postgres.table: %w", err)
	}
	if err := checkIdent(spec.Schema); err != nil {
		return nil, fmt.Errorf("sinks.postgres.schema: %w", err)
	}
	vector := map[string]bool{}
	for i, v := range spec.Vector {
		if err := checkIdent(v); err != nil {
			return nil, fmt.Errorf("sinks.postgres.vector[%d]: %w", i, err)
		}
		vector[v] = true
	}
	cfg, err := pgxpool.ParseConfig(spec.DSN)
	if err != nil {
		// The parse error may quote the DSN with its password; do not wrap it.
		return nil, errors.New("sinks.postgres.dsn: not a valid connection string")
	}
	// Every in-flight shard holds a connection; leave room for several
	// concurrent shards plus Publish unless the DSN says otherwise.
	if !strings.Contains(spec.DSN, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, 16)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sinks.postgres: %w", err)
	}
	return &Sink{
		spec:   spec,
		pool:   pool,
		schema: spec.Schema,
		vector: vector,
		log:    slog.Default().With("sink", "postgres", "table", spec.Schema+"."+spec.Table),
		active: map[string]*shardWriter{},
	}, nil
}

// Name is "postgres".
func (s *Sink) Name() string { return "postgres" }

// Close closes the connection pool, aborting in-flight attempts.
func (s *Sink) Close() error {
	s.mu.Lock()
	ws := make([]*shardWriter, 0, len(s.active))
	for _, w := range s.active {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		_ = w.Abort(context.Background())
	}
	s.pool.Close()
	return nil
}

// ident quotes a name in the sink's schema.
func (s *Sink) ident(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// runTable names the run table of version: {table}__{version}, shortened to
// 63 bytes with a hash of the full name when longer.
func (s *Sink) runTable(version string) string {
	name := s.spec.Table + "__" + version
	if len(name) <= 63 {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	suffix := fmt.Sprintf("__%016x", h.Sum64())
	return truncUTF8(s.spec.Table+"__"+version, 63-len(suffix)) + suffix
}

// shortName derives a ≤ 63-byte object name (an index) from parts.
func shortName(prefix string, parts ...string) string {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	suffix := fmt.Sprintf("_%016x", h.Sum64())
	return truncUTF8(prefix+"_"+strings.Join(parts, "_"), 63-len(suffix)) + suffix
}

func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// wrap adds context to err and marks connection failures with
// sinks.ErrUnreachable.
func (s *Sink) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("postgres sink %s.%s: %s: %w: %w", s.schema, s.spec.Table, op, sinks.ErrUnreachable, err)
	}
	return fmt.Errorf("postgres sink %s.%s: %s: %w", s.schema, s.spec.Table, op, err)
}

// lockKey is the advisory lock serialising DDL on this sink's table.
func (s *Sink) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("precog\x00" + s.schema + "\x00" + s.spec.Table))
	return int64(h.Sum64())
}

// ddl runs fn in a transaction holding the table's advisory lock.
func (s *Sink) ddl(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockKey()); err != nil {
			return err
		}
		return fn(tx)
	})
	return s.wrap(op, err)
}

// columns maps run's schema to Postgres columns, checking the key.
func (s *Sink) columns(ctx context.Context, run sinks.RunInfo) ([]column, error) {
	if run.Schema == nil {
		return nil, fmt.Errorf("postgres sink %s.%s: run %s has no schema", s.schema, s.spec.Table, run.Version)
	}
	if run.Schema.FieldIndices(run.Key) == nil {
		return nil, fmt.Errorf("postgres sink %s.%s: key column %q not in the output schema", s.schema, s.spec.Table, run.Key)
	}
	useVector := false
	if len(s.vector) > 0 {
		ok, err := s.vectorInstalled(ctx)
		if err != nil {
			return nil, err
		}
		useVector = ok
	}
	cols, err := columnsFor(run.Schema, s.vector, useVector)
	if err != nil {
		return nil, fmt.Errorf("postgres sink %s.%s: %w", s.schema, s.spec.Table, err)
	}
	for _, c := range cols {
		if c.name == colShard || c.name == colVersion {
			return nil, fmt.Errorf("postgres sink %s.%s: output field %q collides with the sink's hidden column", s.schema, s.spec.Table, c.name)
		}
	}
	return cols, nil
}

// vectorInstalled reports whether pgvector is installed in the database.
func (s *Sink) vectorInstalled(ctx context.Context) (bool, error) {
	s.mu.Lock()
	if s.hasVector != nil {
		v := *s.hasVector
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	var ok bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')").Scan(&ok)
	if err != nil {
		return false, s.wrap("check pgvector", err)
	}
	if !ok {
		s.log.Warn("pgvector extension not installed; vector fields stored as real[]", "fields", s.spec.Vector)
	}
	s.mu.Lock()
	s.hasVector = &ok
	s.mu.Unlock()
	return ok, nil
}

// paramCols are the run parameter columns, sorted (as in the schema).
func paramCols(run sinks.RunInfo) []string {
	out := make([]string, 0, len(run.Params))
	for k := range run.Params {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Check implements sinks.Checker for `precog validate`: the server answers
// with the DSN's credentials, and the user may create tables in the schema
// (or create the schema) — what Prepare will need.
func (s *Sink) Check(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return s.wrap("connect", err)
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)
		THEN has_schema_privilege($1, 'CREATE') ELSE has_database_privilege(current_database(), 'CREATE') END`, s.schema).Scan(&ok)
	if err != nil {
		return s.wrap("check privileges", err)
	}
	if !ok {
		return fmt.Errorf("postgres sink: user may not create tables in schema %q", s.schema)
	}
	return nil
}

// Prepare checks that Postgres is reachable and creates the bookkeeping
// tables and the run table (replace) or the target table (upsert).
// Idempotent and safe to call from several workers at once.
func (s *Sink) Prepare(ctx context.Context, run sinks.RunInfo) error {
	if err := s.Check(ctx); err != nil {
		return err
	}
	cols, err := s.columns(ctx, run)
	if err != nil {
		return err
	}
	for _, p := range paramCols(run) {
		if run.Schema.FieldIndices(p) == nil {
			return fmt.Errorf("postgres sink %s.%s: run parameter %q has no column in the output schema", s.schema, s.spec.Table, p)
		}
	}
	return s.ddl(ctx, "prepare run "+run.Version, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", s.schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(s.schema)); err != nil {
				return fmt.Errorf("create schema %s: %w", s.schema, err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.ident("precog_versions")+` (
			table_name   text NOT NULL,
			version      text NOT NULL,
			job          text NOT NULL,
			run_id       text NOT NULL,
			run_table    text NOT NULL,
			mode         text NOT NULL,
			published_at timestamptz NOT NULL DEFAULT now(),
			is_current   boolean NOT NULL DEFAULT false,
			PRIMARY KEY (table_name, version))`); err != nil {
			return fmt.Errorf("create precog_versions: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.ident("precog_shards")+` (
			run_table text NOT NULL,
			shard     integer NOT NULL,
			commits   integer NOT NULL,
			PRIMARY KEY (run_table, shard))`); err != nil {
			return fmt.Errorf("create precog_shards: %w", err)
		}
		kind, err := s.relKind(ctx, tx, s.spec.Table)
		if err != nil {
			return err
		}
		if s.spec.Mode == ModeUpsert {
			if kind != "" && kind != "r" && kind != "p" {
				return fmt.Errorf("%s exists and is not a table (upsert mode writes into a table)", s.spec.Table)
			}
			return s.createUpsertTable(ctx, tx, run, cols)
		}
		if kind != "" && kind != "v" {
			return fmt.Errorf("%s exists and is not a view (replace mode publishes a view; drop or rename the table)", s.spec.Table)
		}
		var defs []string
		for _, c := range cols {
			defs = append(defs, quote(c.name)+" "+c.sqlTyp)
		}
		defs = append(defs, quote(colShard)+" integer NOT NULL")
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.ident(s.runTable(run.Version))+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return fmt.Errorf("create run table %s: %w", s.runTable(run.Version), err)
		}
		return nil
	})
}

// relKind returns pg_class.relkind of name in the sink's schema, "" when
// absent.
func (s *Sink) relKind(ctx context.Context, tx pgx.Tx, name string) (string, error) {
	var kind string
	err := tx.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, s.schema, name).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return kind, err
}

// createUpsertTable creates the upsert target keyed by (params…, key).
func (s *Sink) createUpsertTable(ctx context.Context, tx pgx.Tx, run sinks.RunInfo, cols []column) error {
	pk := make([]string, 0, len(run.Params)+1)
	for _, p := range paramCols(run) {
		pk = append(pk, quote(p))
	}
	pk = append(pk, quote(run.Key))
	var defs []string
	for _, c := range cols {
		d := quote(c.name) + " " + c.sqlTyp
		if slices.Contains(pk, quote(c.name)) {
			d += " NOT NULL"
		}
		defs = append(defs, d)
	}
	defs = append(defs, quote(colVersion)+" text NOT NULL")
	defs = append(defs, "PRIMARY KEY ("+strings.Join(pk, ", ")+")")
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.ident(s.spec.Table)+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("create table %s: %w", s.spec.Table, err)
	}
	return nil
}

// Publish makes run the current version. Replace: builds the key index,
// then re-points the view in one transaction and drops run tables beyond
// Retain. Upsert: deletes the params' rows the run did not rewrite. A
// version published before (even if since rolled back) is left alone, so a
// retried Publish never undoes a later one.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	cols, err := s.columns(ctx, run)
	if err != nil {
		return err
	}
	if s.spec.Mode == ModeUpsert {
		return s.publishUpsert(ctx, run)
	}
	rt := s.runTable(run.Version)
	// The index is built before the switch, outside the transaction that
	// locks the view, so readers wait only for the switch itself.
	if err := s.ddl(ctx, "index run table "+rt, func(tx pgx.Tx) error {
		kind, err := s.relKind(ctx, tx, rt)
		if err != nil {
			return err
		}
		if kind == "" {
			return fmt.Errorf("run table %s of version %s does not exist (run not prepared, aborted, or dropped by retention)", rt, run.Version)
		}
		idx := shortName("precog_idx", rt, run.Key)
		if _, err := tx.Exec(ctx, "CREATE INDEX IF NOT EXISTS "+quote(idx)+" ON "+s.ident(rt)+" ("+quote(run.Key)+")"); err != nil {
			return fmt.Errorf("create index on %s: %w", rt, err)
		}
		if _, err := tx.Exec(ctx, "ANALYZE "+s.ident(rt)); err != nil {
			return fmt.Errorf("analyze %s: %w", rt, err)
		}
		return nil
	}); err != nil {
		return err
	}
	var dropped []string
	err = s.ddl(ctx, "publish version "+run.Version, func(tx pgx.Tx) error {
		dropped = nil
		var published bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.ident("precog_versions")+" WHERE table_name = $1 AND version = $2)",
			s.spec.Table, run.Version).Scan(&published); err != nil {
			return err
		}
		if published {
			return nil
		}
		if err := s.pointView(ctx, tx, rt, cols); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE "+s.ident("precog_versions")+" SET is_current = false WHERE table_name = $1 AND is_current", s.spec.Table); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+s.ident("precog_versions")+
			" (table_name, version, job, run_id, run_table, mode, is_current) VALUES ($1, $2, $3, $4, $5, $6, true)",
			s.spec.Table, run.Version, run.Job, run.RunID, rt, s.spec.Mode); err != nil {
			return err
		}
		// Retention: the newest Retain published versions stay (the
		// current one always does); older run tables go.
		rows, err := tx.Query(ctx, "SELECT version, run_table FROM "+s.ident("precog_versions")+
			" WHERE table_name = $1 AND NOT is_current ORDER BY published_at DESC, version DESC OFFSET $2", s.spec.Table, s.spec.Retain-1)
		if err != nil {
			return err
		}
		var old [][2]string
		for rows.Next() {
			var v, t string
			if err := rows.Scan(&v, &t); err != nil {
				return err
			}
			old = append(old, [2]string{v, t})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, o := range old {
			if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+s.ident(o[1])); err != nil {
				return fmt.Errorf("drop old run table %s: %w", o[1], err)
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident("precog_versions")+" WHERE table_name = $1 AND version = $2", s.spec.Table, o[0]); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident("precog_shards")+" WHERE run_table = $1", o[1]); err != nil {
				return err
			}
			dropped = append(dropped, o[0])
		}
		_, err = tx.Exec(ctx, "DELETE FROM "+s.ident("precog_shards")+" WHERE run_table = $1", rt)
		return err
	})
	if err != nil {
		return err
	}
	s.log.Info("published", "version", run.Version, "run_table", rt, "dropped_versions", dropped)
	return nil
}

// pointView replaces the view {table} by one over run table rt. DROP +
// CREATE in the caller's transaction is atomic for readers and, unlike
// CREATE OR REPLACE VIEW, lets column types change between runs.
func (s *Sink) pointView(ctx context.Context, tx pgx.Tx, rt string, cols []column) error {
	kind, err := s.relKind(ctx, tx, s.spec.Table)
	if err != nil {
		return err
	}
	if kind != "" && kind != "v" {
		return fmt.Errorf("%s exists and is not a view", s.spec.Table)
	}
	if kind == "v" {
		if _, err := tx.Exec(ctx, "DROP VIEW "+s.ident(s.spec.Table)); err != nil {
			return fmt.Errorf("drop view %s: %w", s.spec.Table, err)
		}
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = quote(c.name)
	}
	if _, err := tx.Exec(ctx, "CREATE VIEW "+s.ident(s.spec.Table)+" AS SELECT "+strings.Join(names, ", ")+" FROM "+s.ident(rt)); err != nil {
		return fmt.Errorf("create view %s over %s: %w", s.spec.Table, rt, err)
	}
	return nil
}

// publishUpsert deletes the rows of run's params that the run did not
// write and records the version.
func (s *Sink) publishUpsert(ctx context.Context, run sinks.RunInfo) error {
	return s.ddl(ctx, "publish version "+run.Version, func(tx pgx.Tx) error {
		var published bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.ident("precog_versions")+" WHERE table_name = $1 AND version = $2)",
			s.spec.Table, run.Version).Scan(&published); err != nil {
			return err
		}
		if published {
			return nil
		}
		where := []string{quote(colVersion) + " <> $1"}
		args := []any{run.Version}
		for _, p := range paramCols(run) {
			args = append(args, run.Params[p])
			where = append(where, fmt.Sprintf("%s = $%d", quote(p), len(args)))
		}
		tag, err := tx.Exec(ctx, "DELETE FROM "+s.ident(s.spec.Table)+" WHERE "+strings.Join(where, " AND "), args...)
		if err != nil {
			return fmt.Errorf("delete stale rows: %w", err)
		}
		if _, err := tx.Exec(ctx, "UPDATE "+s.ident("precog_versions")+" SET is_current = false WHERE table_name = $1 AND is_current", s.spec.Table); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+s.ident("precog_versions")+
			" (table_name, version, job, run_id, run_table, mode, is_current) VALUES ($1, $2, $3, $4, $5, $6, true)",
			s.spec.Table, run.Version, run.Job, run.RunID, s.spec.Table, s.spec.Mode); err != nil {
			return err
		}
		s.log.Info("published", "version", run.Version, "stale_rows_deleted", tag.RowsAffected())
		return nil
	})
}

// Abort drops the run table of an unpublished run (replace mode). Aborting
// a published version is an error: it is what readers see. In upsert mode
// the rows already merged stay (they replaced earlier rows in place).
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	s.mu.Lock()
	var ws []*shardWriter
	for _, w := range s.active {
		if w.version == run.Version {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		_ = w.Abort(ctx)
	}
	if s.spec.Mode == ModeUpsert {
		return nil
	}
	rt := s.runTable(run.Version)
	return s.ddl(ctx, "abort run "+run.Version, func(tx pgx.Tx) error {
		kind, err := s.relKind(ctx, tx, "precog_versions")
		if err != nil || kind == "" {
			return err // never prepared: nothing to drop
		}
		var published bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.ident("precog_versions")+" WHERE table_name = $1 AND version = $2)",
			s.spec.Table, run.Version).Scan(&published); err != nil {
			return err
		}
		if published {
			return fmt.Errorf("version %s is published; roll back instead of aborting", run.Version)
		}
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+s.ident(rt)); err != nil {
			return fmt.Errorf("drop run table %s: %w", rt, err)
		}
		_, err = tx.Exec(ctx, "DELETE FROM "+s.ident("precog_shards")+" WHERE run_table = $1", rt)
		return err
	})
}

// Versions lists the retained published versions, newest first.
func (s *Sink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	rows, err := s.pool.Query(ctx, "SELECT version FROM "+s.ident("precog_versions")+
		" WHERE table_name = $1 ORDER BY published_at DESC, version DESC", s.spec.Table)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table: nothing published yet
			return nil, nil
		}
		return nil, s.wrap("list versions", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return vs, s.wrap("list versions", err)
}

// Current returns the version the view shows now ("" when none).
func (s *Sink) Current(ctx context.Context, run sinks.RunInfo) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT version FROM "+s.ident("precog_versions")+" WHERE table_name = $1 AND is_current",
		s.spec.Table).Scan(&v)
	var pe *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || (errors.As(err, &pe) && pe.Code == "42P01") {
		return "", nil // nothing published yet
	}
	return v, s.wrap("current version", err)
}

// Rollback points the view back at a retained version's run table in one
// transaction. Upsert mode keeps no earlier versions.
func (s *Sink) Rollback(ctx context.Context, run sinks.RunInfo, version string) error {
	if s.spec.Mode == ModeUpsert {
		return fmt.Errorf("postgres sink %s.%s: upsert mode keeps no earlier versions to roll back to", s.schema, s.spec.Table)
	}
	return s.ddl(ctx, "roll back to "+version, func(tx pgx.Tx) error {
		var rt string
		err := tx.QueryRow(ctx, "SELECT run_table FROM "+s.ident("precog_versions")+" WHERE table_name = $1 AND version = $2",
			s.spec.Table, version).Scan(&rt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("version %q is not a retained published version", version)
		}
		if err != nil {
			return err
		}
		// The view's columns are those of the run table (minus _shard).
		rows, err := tx.Query(ctx, `SELECT a.attname FROM pg_attribute a
			JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, s.schema, rt)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		var cols []column
		for _, n := range names {
			if n != colShard {
				cols = append(cols, column{name: n})
			}
		}
		if len(cols) == 0 {
			return fmt.Errorf("run table %s of version %s is missing", rt, version)
		}
		if err := s.pointView(ctx, tx, rt, cols); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE "+s.ident("precog_versions")+" SET is_current = (version = $2) WHERE table_name = $1", s.spec.Table, version); err != nil {
			return err
		}
		s.log.Info("rolled back", "version", version, "run_table", rt)
		return nil
	})
}
