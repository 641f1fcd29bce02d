// Package postgres is the Postgres sink: predictions in a table analysts
// query and the lookup API falls back to (contract 2 of docs/contracts.md).
//
// # Writing
//
// Each run writes into its own run table {table}__{version} (shortened with a
// hash where that exceeds Postgres' 63 bytes) with a hidden _shard column.
// Each shard attempt is one transaction: it locks the shard's row in
// precog_shards, deletes the rows an earlier committed attempt left (only
// when there was one, so a first attempt never scans), and streams its rows
// with a binary COPY encoded straight from the Arrow columns. A retried
// shard thus replaces its own rows exactly; an attempt that never commits
// leaves nothing.
//
// # Two-phase publish
//
// Stage (stage.go) does every fallible step: it deletes rows of shards the
// ledger did not commit (abandoned attempts), compares the rows per shard
// with the ledger (*sinks.MissingError), builds the unique key index (the
// exact cross-shard duplicate check, *sinks.DuplicateKeyError), ANALYZEs,
// and in upsert mode checks the staged rows fit the target table. Publish
// is then one transaction that only switches what readers see.
//
// mode: replace (default): readers query the view {table}, which Publish
// re-points at the run table (view.go): CREATE OR REPLACE VIEW when the
// columns allow, otherwise DROP + CREATE re-applying the old view's grants,
// owner and comment, so readers' privileges survive every publish and
// rollback. Run tables beyond Retain are dropped at Publish; Rollback points
// the view back at a retained one.
//
// mode: upsert (upsert.go): {table} is a real table keyed by (run params…,
// [model_version,] key). Publish deletes the partition's rows and inserts
// the staged ones in one transaction, so a reader sees the whole old
// partition or the whole new one, and an interrupted run changes nothing.
//
// # Safety
//
// precog_objects (registry.go) records, by oid, every table and view the
// sink created and for which job. Nothing is written into, replaced or
// dropped unless it is registered to the same job: a user's object by
// that name is a *sinks.NotOwnedError from Check and Prepare, and retention
// and Abort leave it alone. precog_locks (lock.go) holds one writer per
// target with a renewed lease. precog_versions records each published
// version; DDL runs under a transaction-scoped advisory lock per table, so
// several workers may Prepare, Stage and Publish concurrently.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
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
	job    string // owner of what the sink creates, in precog_objects
	pool   *pgxpool.Pool
	schema string
	vector map[string]bool
	log    *slog.Logger
	// lockTTL is the lease of a writer lock; renewed every lockTTL/3.
	lockTTL time.Duration

	mu     sync.Mutex
	active map[string]*shardWriter // in-flight attempt per version/shard
	// hasVector caches whether the pgvector extension is installed.
	hasVector *bool
	// ddlLabel names this process's DDL sessions while it holds the writer
	// lock (lockLabel), so that a writer taking the lock over can end the
	// transactions a frozen holder left open; "" while none is held.
	ddlLabel string
}

var (
	_ sinks.Sink       = (*Sink)(nil)
	_ sinks.Rollbacker = (*Sink)(nil)
	_ sinks.Checker    = (*Sink)(nil)
)

// New validates spec and returns a sink for job (the owner recorded for
// every object the sink creates, and checked before it touches one). It
// does not connect: Check and Prepare do, so a spec can be validated offline.
func New(ctx context.Context, job string, spec jobs.PostgresSinkSpec) (*Sink, error) {
	if job == "" {
		return nil, errors.New("sinks.postgres: empty job name (it owns the tables the sink creates)")
	}
	spec.Normalize(nil)
	if !spec.Mode.Valid() {
		return nil, fmt.Errorf("sinks.postgres.mode: %q is not replace or upsert", spec.Mode)
	}
	if spec.ModelVersionInKey && spec.Mode != jobs.PostgresUpsert {
		return nil, errors.New("sinks.postgres.model_version_in_key: only for mode upsert")
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
	// A frozen or partitioned process (SIGSTOP, a cut network) must not
	// hold what readers need: its session is ended once it sits idle in a
	// transaction (the view's lock goes with it, and a publish lease
	// takeover finishes the publish). A DSN may set its own.
	if _, ok := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(idleInTxTimeout.Milliseconds(), 10)
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
		spec:    spec,
		job:     job,
		pool:    pool,
		schema:  spec.Schema,
		vector:  vector,
		log:     slog.Default().With("sink", "postgres", "table", spec.Schema+"."+spec.Table),
		lockTTL: defaultLockTTL,
		active:  map[string]*shardWriter{},
	}, nil
}

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

// Session timeouts of the sink's connections (variables so tests can
// shorten them).
var (
	// idleInTxTimeout ends a session idle inside a transaction: a frozen
	// publisher releases the view within this bound, below the statement
	// timeouts readers commonly run with (15-30s).
	idleInTxTimeout = 10 * time.Second
	// ddlLockTimeout bounds a DDL step's wait for a table or view lock.
	ddlLockTimeout = 5 * time.Second
)

// lockKey is the advisory lock serialising DDL on this sink's table.
func (s *Sink) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("precog\x00" + s.schema + "\x00" + s.spec.Table))
	return int64(h.Sum64())
}

// ddl runs fn in a transaction holding the table's advisory lock.
//
// Once it holds the advisory lock, a lock on a table or view it waits for
// longer than ddlLockTimeout fails the step (SQLSTATE 55P03, retried as
// transient): while the view's cutover waits behind a long reader, every
// new reader queues behind the cutover, so the wait must stay short.
func (s *Sink) ddl(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	s.mu.Lock()
	label := s.ddlLabel
	s.mu.Unlock()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if label != "" {
			if _, err := tx.Exec(ctx, "SET LOCAL application_name = '"+label+"'"); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockKey()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", ddlLockTimeout.Milliseconds())); err != nil {
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
// Check implements sinks.Checker for `precog validate`; it writes nothing.
// The server answers with the DSN's credentials, the user may create tables
// in the schema (or create the schema) — what Prepare will need — and
// {table}, if it exists, is precog's for this job (a *sinks.NotOwnedError
// otherwise).
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
	if _, err := s.owned(ctx, s.pool, s.spec.Table); err != nil {
		return s.wrap("check ownership", err)
	}
	return nil
}

// Prepare checks reachability and ownership (writing nothing when {table}
// is not precog's), then creates the bookkeeping tables, the run table and,
// in upsert mode, the target table. Idempotent and safe to call from
// several workers at once.
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
	rt := s.runTable(run.Version)
	return s.ddl(ctx, "prepare run "+run.Version, func(tx pgx.Tx) error {
		// Ownership again under the lock, before anything is created.
		target, err := s.owned(ctx, tx, s.spec.Table)
		if err != nil {
			return err
		}
		if o, err := s.owned(ctx, tx, rt); err != nil {
			return err
		} else if o.exists && o.relkind != "r" {
			return fmt.Errorf("run table %s is not a table", rt)
		}
		if s.spec.Mode == jobs.PostgresReplace && target.exists && target.relkind != "v" {
			return fmt.Errorf("%s exists and is not a view (replace mode publishes a view; drop or rename the table)", s.spec.Table)
		}
		if s.spec.Mode == jobs.PostgresUpsert && target.exists && target.relkind != "r" && target.relkind != "p" {
			return fmt.Errorf("%s exists and is not a table (upsert mode writes into a table)", s.spec.Table)
		}
		if err := s.createBookkeeping(ctx, tx); err != nil {
			return err
		}
		if s.spec.Mode == jobs.PostgresUpsert {
			if err := s.createUpsertTable(ctx, tx, run, cols); err != nil {
				return err
			}
		}
		defs := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			defs = append(defs, quote(c.name)+" "+c.sqlTyp)
		}
		defs = append(defs, quote(colShard)+" integer NOT NULL")
		return s.createOwned(ctx, tx, rt, kindRunTable, run.Version,
			"CREATE TABLE "+s.ident(rt)+" ("+strings.Join(defs, ", ")+")")
	})
}
