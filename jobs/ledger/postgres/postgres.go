// Package postgres is the cluster ledger: runs and shards in Postgres tables
// (precog_runs, precog_run_shards) shared by any number of `precog worker`
// processes. Shards are claimed with FOR UPDATE SKIP LOCKED under leases
// that use the database's clock (now()), never the workers'. A lease is
// (run, shard, worker); calls from a worker whose lease expired or was
// taken over return ledger.ErrLeaseLost and change nothing. Idle workers
// wake through LISTEN/NOTIFY on channel precog_ledger (payload: the pool),
// with a polling fallback.
//
// The hot statements (claim, heartbeat, complete) are one round trip each
// and touch no run row except a run's first claim, so that workers of one
// run do not queue on it: run counts are summed from committed shards when
// a run is read.
//
// Open creates and migrates the schema (migrations.go) under an advisory
// lock, so many workers may start at once.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/internal/wake"
)

// NotifyChannel is the LISTEN/NOTIFY channel; the payload is a pool name.
const NotifyChannel = "precog_ledger"

// Options tune the ledger's connections. The zero value is usable.
type Options struct {
	// PollInterval is how often Wake fires without a notice, to catch
	// expired leases and missed notices. Default 1s.
	PollInterval time.Duration
	// PollOnly disables LISTEN (e.g. behind PgBouncer in transaction mode,
	// where a session-level LISTEN does not work): Wake only polls.
	PollOnly bool
	// StatementTimeout bounds every statement (statement_timeout). Default 30s.
	StatementTimeout time.Duration
	// IdleInTxTimeout ends sessions idle inside a transaction
	// (idle_in_transaction_session_timeout), so a stuck worker cannot hold
	// row locks. Default 60s.
	IdleInTxTimeout time.Duration
	// MaxConns bounds the pool. Default: pgxpool's (max(4, cores)).
	MaxConns int32
	// Logger receives listener reconnects. Default slog.Default().
	Logger *slog.Logger
	// RejectsPerRun bounds the rejected rows stored per run (Rejects).
	// Default ledger.DefaultRejectsPerRun.
	RejectsPerRun int
}

func (o Options) withDefaults() Options {
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = 30 * time.Second
	}
	if o.IdleInTxTimeout <= 0 {
		o.IdleInTxTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RejectsPerRun <= 0 {
		o.RejectsPerRun = ledger.DefaultRejectsPerRun
	}
	return o
}

// Ledger is a ledger.Cluster over one Postgres database.
type Ledger struct {
	pool *pgxpool.Pool
	opts Options
	// connCfg opens the LISTEN connection (never logged: it holds the DSN's
	// password).
	connCfg *pgx.ConnConfig
	hub     *wake.Hub
	closeMu sync.Mutex
	closed  bool
}

var _ ledger.Store = (*Ledger)(nil)

// Open connects to dsn, creates or migrates the ledger schema and returns
// the ledger. The DSN is never logged nor put in errors.
func Open(ctx context.Context, dsn string, opts Options) (*Ledger, error) {
	opts = opts.withDefaults()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("ledger: the Postgres ledger URL does not parse (check --db / PRECOG_DATABASE_URL)")
	}
	rp := cfg.ConnConfig.RuntimeParams
	rp["statement_timeout"] = strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10)
	rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(opts.IdleInTxTimeout.Milliseconds(), 10)
	rp["application_name"] = "precog-ledger"
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ledger: connect to Postgres %s/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ledger: migrate schema of Postgres database %s: %w", cfg.ConnConfig.Database, err)
	}
	l := &Ledger{pool: pool, opts: opts, connCfg: cfg.ConnConfig.Copy()}
	l.hub = newHub(l)
	return l, nil
}

// Close stops the listener and closes the pool.
func (l *Ledger) Close() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.hub.Close()
	l.pool.Close()
	return nil
}

// micros passes a lease to SQL as "$n::bigint * interval '1 microsecond'".
func micros(d time.Duration) int64 { return d.Microseconds() }

const openStates = `('pending', 'running', 'publishing')`

// runCols reads a run with its counts summed from committed shards.
const runCols = `r.id, r.job, r.version, r.params, r.params_key, r.spec_hash, r.model_version,
	r.pool, r.priority, r.state, r.error, r.shards, r.spec, r.spec_file, r.created_at, r.updated_at, r.retries,
	c.rows_in, c.rows_out, c.rejected`

const runFrom = `precog_runs r CROSS JOIN LATERAL (
	SELECT coalesce(sum(s.rows_in), 0)::bigint AS rows_in, coalesce(sum(s.rows_out), 0)::bigint AS rows_out,
		coalesce(sum(s.rejected), 0)::bigint AS rejected
	FROM precog_run_shards s WHERE s.run_id = r.id AND s.state = 'committed') c`

func scanRun(row pgx.Row) (jobs.Run, error) {
	var r jobs.Run
	var state string
	err := row.Scan(&r.ID, &r.Job, &r.Version, &r.Params, &r.ParamsKey, &r.SpecHash, &r.ModelVersion,
		&r.Pool, &r.Priority, &state, &r.Error, &r.Shards, &r.Spec, &r.SpecFile, &r.CreatedAt, &r.UpdatedAt, &r.Retries,
		&r.Counts.RowsIn, &r.Counts.RowsOut, &r.Counts.Rejected)
	r.State = jobs.RunState(state)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, err
}

// shardCols reads a shard; worker and lease are the primary holder's.
// A shard a cancel ended shows its holders' lease mark (the later of the
// two leases) until they stop.
const shardCols = `s.run_id, s.idx, s.plan, s.est_rows, s.state, s.attempts, coalesce(s.worker, ''),
	CASE WHEN s.state = 'running' THEN s.lease_until ELSE greatest(s.lease_until, s.lease2_until) END,
	s.rows_in, s.rows_out, s.rejected, s.key_sketch, s.error, s.updated_at`

func scanShard(row pgx.Row, extra ...any) (jobs.Shard, error) {
	var s jobs.Shard
	var state string
	var lease *time.Time
	var plan []byte
	err := row.Scan(append([]any{&s.RunID, &s.Index, &plan, &s.EstRows, &state, &s.Attempts, &s.Worker, &lease,
		&s.Counts.RowsIn, &s.Counts.RowsOut, &s.Counts.Rejected, &s.Counts.KeySketch, &s.Error, &s.UpdatedAt}, extra...)...)
	s.State = jobs.ShardState(state)
	if plan != nil {
		s.Plan = plan
	}
	if lease != nil {
		s.LeaseUntil = lease.UTC()
	}
	s.UpdatedAt = s.UpdatedAt.UTC()
	return s, err
}

func poolOf(r jobs.Run) string {
	return jobs.PoolOrDefault(r.Pool)
}

// CreateRun stores run in state pending with its shards (COPY), refusing a
// second open run of (job, params) with an *ledger.OpenRunError, and wakes
// the run's pool.
func (l *Ledger) CreateRun(ctx context.Context, run jobs.Run, shards []jobs.Shard) error {
	if run.ID == "" {
		return errors.New("ledger: create run: empty run id")
	}
	run.Pool = poolOf(run)
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error { return createRunTx(ctx, tx, run, shards) })
	return l.createRunError(ctx, run, err)
}

// createRunTx inserts run and its shards in tx and notifies the pool.
func createRunTx(ctx context.Context, tx pgx.Tx, run jobs.Run, shards []jobs.Shard) error {
	created := run.CreatedAt
	if created.IsZero() {
		created = time.Now().UTC()
	}
	_, err := tx.Exec(ctx, `INSERT INTO precog_runs (id, job, version, params, params_key, spec_hash, model_version,
		pool, priority, state, shards, spec, spec_file, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12, $13, now())`,
		run.ID, run.Job, run.Version, run.Params, run.ParamsKey, run.SpecHash, run.ModelVersion,
		run.Pool, run.Priority, len(shards), run.Spec, run.SpecFile, created)
	if err != nil {
		return err
	}
	seen := make(map[int]bool, len(shards))
	rows := make([][]any, len(shards))
	for i, s := range shards {
		if s.Index < 0 || s.Index > 1<<31-1 {
			return fmt.Errorf("shard index %d out of range", s.Index)
		}
		if seen[s.Index] {
			return fmt.Errorf("shard index %d appears twice", s.Index)
		}
		seen[s.Index] = true
		rows[i] = []any{run.ID, s.Index, []byte(s.Plan), s.EstRows, "pending", time.Now()}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"precog_run_shards"},
		[]string{"run_id", "idx", "plan", "est_rows", "state", "updated_at"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("insert shards: %w", err)
	}
	return notify(ctx, tx, run.Pool)
}

// createRunError turns CreateRun's constraint violations into the errors
// callers branch on.
func (l *Ledger) createRunError(ctx context.Context, run jobs.Run, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		if pe.ConstraintName == "precog_runs_open_key" {
			open, oerr := l.OpenRun(ctx, run.Job, run.ParamsKey)
			if oerr == nil {
				return fmt.Errorf("ledger: create run %s: %w", run.ID, &ledger.OpenRunError{Job: run.Job, ParamsKey: run.ParamsKey, RunID: open.ID, State: open.State})
			}
			return fmt.Errorf("ledger: create run %s: job %s (params %q) has another open run: %w", run.ID, run.Job, run.ParamsKey, ledger.ErrRunOpen)
		}
		return fmt.Errorf("ledger: create run %s: run %s already exists", run.ID, run.ID)
	}
	if err != nil {
		return fmt.Errorf("ledger: create run %s: %w", run.ID, err)
	}
	return nil
}

// notify wakes the workers of pool when tx commits.
func notify(ctx context.Context, tx pgx.Tx, pool string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, pool); err != nil {
		return fmt.Errorf("notify pool %s: %w", pool, err)
	}
	return nil
}

// OpenRun returns the open run of (job, paramsKey).
func (l *Ledger) OpenRun(ctx context.Context, job, paramsKey string) (jobs.Run, error) {
	r, err := scanRun(l.pool.QueryRow(ctx, `SELECT `+runCols+` FROM `+runFrom+`
		WHERE r.job = $1 AND r.params_key = $2 AND r.state IN `+openStates+`
		ORDER BY r.created_at DESC, r.id DESC LIMIT 1`, job, paramsKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("ledger: open run of %s %q: %w", job, paramsKey, ledger.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("ledger: open run of %s %q: %w", job, paramsKey, err)
	}
	return r, nil
}

// Run returns one run.
func (l *Ledger) Run(ctx context.Context, id string) (jobs.Run, error) {
	r, err := scanRun(l.pool.QueryRow(ctx, `SELECT `+runCols+` FROM `+runFrom+` WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("ledger: run %s: %w", id, ledger.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("ledger: run %s: %w", id, err)
	}
	return r, nil
}

// Runs lists runs newest first, of one job or all ("").
func (l *Ledger) Runs(ctx context.Context, job string, limit int) ([]jobs.Run, error) {
	q := `SELECT ` + runCols + ` FROM ` + runFrom + ` WHERE ($1 = '' OR r.job = $1)
		ORDER BY r.created_at DESC, r.id DESC`
	args := []any{job}
	if limit > 0 {
		q += ` LIMIT $2`
		args = append(args, limit)
	}
	rows, err := l.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobs.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs: %w", err)
	}
	return out, nil
}

// Shards returns a run's shards ordered by index.
func (l *Ledger) Shards(ctx context.Context, runID string) ([]jobs.Shard, error) {
	rows, err := l.pool.Query(ctx, `SELECT `+shardCols+`, s.cost FROM precog_run_shards s WHERE s.run_id = $1 ORDER BY s.idx`, runID)
	if err != nil {
		return nil, fmt.Errorf("ledger: shards of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, scanShardCost)
	if err != nil {
		return nil, fmt.Errorf("ledger: shards of run %s: %w", runID, err)
	}
	if len(out) == 0 {
		if _, err := l.Run(ctx, runID); err != nil {
			return nil, fmt.Errorf("ledger: shards: %w", err)
		}
	}
	return out, nil
}

// RejectSample implements ledger.Ledger: the samples of the run's committed
// shards, by shard then position.
func (l *Ledger) RejectSample(ctx context.Context, runID string, limit int) ([]jobs.Reject, error) {
	var lim *int // NULL: LIMIT ALL
	if limit > 0 {
		lim = &limit
	}
	rows, err := l.pool.Query(ctx, `SELECT e.value FROM precog_run_shards s
		CROSS JOIN LATERAL jsonb_array_elements(s.reject_sample) WITH ORDINALITY AS e(value, n)
		WHERE s.run_id = $1 AND s.state = 'committed' AND s.reject_sample IS NOT NULL
		ORDER BY s.idx, e.n LIMIT $2`, runID, lim)
	if err != nil {
		return nil, fmt.Errorf("ledger: reject sample of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobs.Reject, error) {
		var r jobs.Reject
		var b []byte
		if err := row.Scan(&b); err != nil {
			return r, err
		}
		return r, json.Unmarshal(b, &r)
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: reject sample of run %s: %w", runID, err)
	}
	if len(out) == 0 {
		if _, err := l.Run(ctx, runID); err != nil {
			return nil, fmt.Errorf("ledger: reject sample: %w", err)
		}
	}
	return out, nil
}
