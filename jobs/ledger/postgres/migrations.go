package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// migrations are the ledger's schema, one step per version: step i brings
// the schema to version i+1. Steps are only ever appended, never edited,
// since databases in the field record how far they got.
var migrations = []string{
	// 1: runs and shards.
	`
CREATE TABLE precog_runs (
	id               text PRIMARY KEY,
	job              text NOT NULL,
	version          text NOT NULL,
	params           jsonb,
	params_key       text NOT NULL,
	spec_hash        text NOT NULL DEFAULT '',
	model_version    text NOT NULL DEFAULT '',
	pool             text NOT NULL,
	priority         integer NOT NULL DEFAULT 0,
	state            text NOT NULL,
	error            text NOT NULL DEFAULT '',
	shards           integer NOT NULL,
	spec             bytea,
	spec_file        text NOT NULL DEFAULT '',
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	publisher        text,
	publish_until    timestamptz,
	publish_attempts integer NOT NULL DEFAULT 0
);
-- At most one open run per (job, params): makes CreateRun race-free.
CREATE UNIQUE INDEX precog_runs_open_key ON precog_runs (job, params_key)
	WHERE state IN ('pending', 'running', 'publishing');
CREATE INDEX precog_runs_open_pool ON precog_runs (pool)
	WHERE state IN ('pending', 'running', 'publishing');
CREATE INDEX precog_runs_created ON precog_runs (created_at DESC, id DESC);
CREATE INDEX precog_runs_job_created ON precog_runs (job, created_at DESC, id DESC);

CREATE TABLE precog_run_shards (
	run_id       text NOT NULL REFERENCES precog_runs (id) ON DELETE CASCADE,
	idx          integer NOT NULL,
	plan         bytea,
	est_rows     bigint NOT NULL DEFAULT 0,
	state        text NOT NULL,
	attempts     integer NOT NULL DEFAULT 0,
	-- The primary holder of a running shard.
	worker       text,
	lease_until  timestamptz,
	claimed_at   timestamptz,
	-- A speculative second holder of a straggling shard.
	worker2      text,
	lease2_until timestamptz,
	claimed2_at  timestamptz,
	rows_in      bigint NOT NULL DEFAULT 0,
	rows_out     bigint NOT NULL DEFAULT 0,
	rejected     bigint NOT NULL DEFAULT 0,
	key_sketch   text NOT NULL DEFAULT '',
	-- Milliseconds the committed attempt took: the straggler baseline.
	run_ms       double precision,
	error        text NOT NULL DEFAULT '',
	updated_at   timestamptz NOT NULL,
	PRIMARY KEY (run_id, idx)
) WITH (fillfactor = 80);
CREATE INDEX precog_run_shards_pending ON precog_run_shards (run_id, idx) WHERE state = 'pending';
CREATE INDEX precog_run_shards_running ON precog_run_shards (run_id, idx) WHERE state = 'running';
`,
	// 2: the scheduler's ticks (one row per job and scheduled time) and
	// leader leases.
	`
CREATE TABLE precog_ticks (
	job           text NOT NULL,
	scheduled_for timestamptz NOT NULL,
	outcome       text NOT NULL,
	run_id        text NOT NULL DEFAULT '',
	reason        text NOT NULL DEFAULT '',
	recorded_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (job, scheduled_for)
);
CREATE TABLE precog_leaders (
	name   text PRIMARY KEY,
	holder text NOT NULL,
	until  timestamptz NOT NULL
);
`,
	// 3: a capped sample of each committed shard's rejected rows (a JSON
	// array of jobs.Reject), written by Complete.
	`
ALTER TABLE precog_run_shards ADD COLUMN reject_sample jsonb;
`,
	// 4: when a scheduler first saw each job: a job with no tick yet
	// starts from it, so a failover or a restart before the job's first
	// tick does not lose that tick.
	`
CREATE TABLE precog_jobs_seen (
	job        text PRIMARY KEY,
	first_seen timestamptz NOT NULL
);
`,
	// 5: a backfill and its child runs, one per value (a
	// retried value gets another). A waiting run (admitted false) is not
	// claimable; precog_backfill_admit admits waiting runs in value order
	// while fewer than parallel admitted runs are open, called when a
	// backfill gains runs and, by trigger, when one of its runs ends, so
	// the bound holds whichever statement ends a run.
	`
CREATE TABLE precog_backfills (
	id         text PRIMARY KEY,
	job        text NOT NULL,
	param      text NOT NULL,
	from_value text NOT NULL,
	to_value   text NOT NULL,
	step       text NOT NULL,
	params_key text NOT NULL DEFAULT '',
	parallel   integer NOT NULL CHECK (parallel > 0),
	priority   integer NOT NULL DEFAULT 0,
	pool       text NOT NULL,
	cancelled  boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE INDEX precog_backfills_job_created ON precog_backfills (job, created_at DESC, id DESC);
CREATE TABLE precog_backfill_runs (
	backfill_id text NOT NULL REFERENCES precog_backfills (id) ON DELETE CASCADE,
	pos         integer NOT NULL,
	value       text NOT NULL,
	run_id      text NOT NULL,
	seq         bigserial,
	admitted    boolean NOT NULL DEFAULT false,
	PRIMARY KEY (backfill_id, run_id)
);
CREATE INDEX precog_backfill_runs_run ON precog_backfill_runs (run_id);
CREATE INDEX precog_backfill_runs_waiting ON precog_backfill_runs (run_id) WHERE NOT admitted;

CREATE FUNCTION precog_backfill_admit(bf text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	par integer;
	stopped boolean;
	bpool text;
	busy integer;
BEGIN
	SELECT b.parallel, b.cancelled, b.pool INTO par, stopped, bpool FROM precog_backfills b WHERE b.id = bf FOR UPDATE;
	IF NOT FOUND OR stopped THEN
		RETURN;
	END IF;
	SELECT count(*) INTO busy FROM precog_backfill_runs br JOIN precog_runs r ON r.id = br.run_id
		WHERE br.backfill_id = bf AND br.admitted AND r.state IN ('pending', 'running', 'publishing');
	IF busy >= par THEN
		RETURN;
	END IF;
	UPDATE precog_backfill_runs u SET admitted = true FROM (
		SELECT br.run_id FROM precog_backfill_runs br JOIN precog_runs r ON r.id = br.run_id
		WHERE br.backfill_id = bf AND NOT br.admitted AND r.state IN ('pending', 'running')
		ORDER BY br.pos, br.seq LIMIT par - busy) w
	WHERE u.backfill_id = bf AND u.run_id = w.run_id;
	IF FOUND THEN
		PERFORM pg_notify('precog_ledger', bpool);
	END IF;
END $$;

CREATE FUNCTION precog_backfill_run_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	bf text;
BEGIN
	FOR bf IN SELECT backfill_id FROM precog_backfill_runs WHERE run_id = NEW.id LOOP
		PERFORM precog_backfill_admit(bf);
	END LOOP;
	RETURN NULL;
END $$;

CREATE TRIGGER precog_backfill_run_ended AFTER UPDATE OF state ON precog_runs
	FOR EACH ROW WHEN (NEW.state IN ('succeeded', 'failed', 'cancelled', 'held') AND OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION precog_backfill_run_ended();
`,
	// 6: how often precog retry took a failed run back up (RetryRun): the
	// generation workers key their prepared sinks by.
	`
ALTER TABLE precog_runs ADD COLUMN retries integer NOT NULL DEFAULT 0;
`,
	// 7: checks before a publish (ledger.Checks): each shard's output
	// profile, each run's check report and who accepted or discarded it
	// when held, and the published version's profile per (job, target).
	`
CREATE TABLE precog_shard_profiles (
	run_id  text NOT NULL REFERENCES precog_runs (id) ON DELETE CASCADE,
	idx     integer NOT NULL,
	profile text NOT NULL,
	PRIMARY KEY (run_id, idx)
);
CREATE TABLE precog_check_reports (
	run_id      text PRIMARY KEY REFERENCES precog_runs (id) ON DELETE CASCADE,
	report      jsonb NOT NULL,
	resolved_by text,
	reason      text,
	resolved_at timestamptz
);
CREATE TABLE precog_baselines (
	job          text NOT NULL,
	target       text NOT NULL,
	run_id       text NOT NULL,
	version      text NOT NULL,
	rows_out     bigint NOT NULL,
	profile      text NOT NULL,
	published_at timestamptz NOT NULL,
	PRIMARY KEY (job, target)
);
`,
	// 8: the workers (registered by their heartbeats, removed on a clean
	// stop) and every stored rejected row of a run (bounded per run),
	// written by Complete with the shard's commit.
	`
CREATE TABLE precog_workers (
	id           text PRIMARY KEY,
	pool         text NOT NULL,
	devices      text[] NOT NULL DEFAULT '{}',
	version      text NOT NULL DEFAULT '',
	model_cache  text NOT NULL DEFAULT '',
	lease_us     bigint NOT NULL,
	current      jsonb,
	started_at   timestamptz NOT NULL DEFAULT now(),
	heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE precog_rejects (
	run_id   text NOT NULL REFERENCES precog_runs (id) ON DELETE CASCADE,
	shard    integer NOT NULL,
	n        integer NOT NULL,
	key      text NOT NULL,
	position text NOT NULL,
	reason   text NOT NULL,
	PRIMARY KEY (run_id, shard, n)
);
`,
	// 9: what each committed shard's attempt used (jobs.Cost as JSON:
	// CPU seconds, GPU seconds and busy time); NULL for shards committed
	// before, which read as no cost.
	`
ALTER TABLE precog_run_shards ADD COLUMN IF NOT EXISTS cost jsonb;
`,
	// 10: the runs a worker cannot execute (a spec it cannot load) and why.
	`ALTER TABLE precog_workers ADD COLUMN IF NOT EXISTS unable jsonb;`,
	// 11: cancelled runs whose sinks still hold their data (the cancelling
	// process lacked the sinks' environment): a worker of the pool, which
	// has it, finishes the cleanup (ledger.Cleanups).
	`
CREATE TABLE IF NOT EXISTS precog_cleanups (
	run_id     text PRIMARY KEY REFERENCES precog_runs (id) ON DELETE CASCADE,
	pool       text NOT NULL,
	reason     text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS precog_cleanups_pool ON precog_cleanups (pool);
`,
	// 12: when a pending cleanup is due (a failed run's staged data is kept
	// for retry.keep_failed, so precog retry resumes it; a row recorded
	// before is due at once, as it was) and who claimed it until when (a
	// lease: RetryRun refuses a run whose sinks are being cleaned).
	`
ALTER TABLE precog_cleanups ADD COLUMN IF NOT EXISTS not_before timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE precog_cleanups ADD COLUMN IF NOT EXISTS holder text;
ALTER TABLE precog_cleanups ADD COLUMN IF NOT EXISTS held_until timestamptz;
`,
}

// migrateLockKey is the pg_advisory_xact_lock key that serialises schema
// migrations of workers starting at once ("precog" in ASCII).
const migrateLockKey = 0x707265636f67

// migrate brings the schema to len(migrations) in one transaction under an
// advisory lock, so that ten workers starting at once apply each step once.
// A database whose schema is newer than this binary knows is refused.
func migrate(ctx context.Context, conn interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLockKey)); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS precog_schema (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create precog_schema: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM precog_schema`).Scan(&have); err != nil {
		return fmt.Errorf("read precog_schema: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("%w: the database's ledger schema is version %d, this precog knows up to %d: upgrade precog",
			errSchemaNewer, have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("schema step %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO precog_schema (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("record schema step %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// errSchemaNewer: the database was migrated by a newer precog.
var errSchemaNewer = errors.New("ledger schema too new")

// SchemaVersion is the schema version this binary migrates to.
func SchemaVersion() int { return len(migrations) }
