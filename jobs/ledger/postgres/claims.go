package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// claimSQL leases one shard of the candidate runs (the cand CTE, ordered
// best first) in one statement: an expired lease first (its holder is
// presumed dead), else the lowest pending index of the first candidate
// run with a pending shard that no concurrent claimer has locked. %s is
// the candidates' filter; $1 the filter's argument, $2 the worker, $3 the
// lease in microseconds.
//
// Cost: the claim is the ledger's hot statement. One pass over each
// candidate's running shards (a handful: at most one per worker) gives both
// its fair-share load (busy) and its oldest lease, so the expired-lease
// search only visits runs that have one. With 30 running shards over 4
// runs this cut a claim from 97 to 62 shared buffers.
const claimSQL = `
WITH cand AS MATERIALIZED (
	SELECT r.id, r.priority, r.created_at, b.busy, b.oldest
	FROM precog_runs r CROSS JOIN LATERAL (
		SELECT count(*) AS busy, min(x.lease_until) AS oldest FROM precog_run_shards x
		WHERE x.run_id = r.id AND x.state = 'running') b
	WHERE %s AND r.state IN ('pending', 'running')
	ORDER BY r.priority DESC, b.busy, r.created_at, r.id
),
exp AS (
	SELECT sh.run_id, sh.idx FROM precog_run_shards sh JOIN cand ON cand.id = sh.run_id
	WHERE cand.oldest <= now() AND sh.state = 'running' AND sh.lease_until <= now() AND (sh.worker2 IS NULL OR sh.lease2_until <= now())
	ORDER BY cand.priority DESC, cand.created_at, sh.run_id, sh.idx
	LIMIT 1 FOR UPDATE OF sh SKIP LOCKED
),
pend AS (
	SELECT p.run_id, p.idx FROM cand CROSS JOIN LATERAL (
		SELECT sh.run_id, sh.idx FROM precog_run_shards sh WHERE sh.run_id = cand.id AND sh.state = 'pending'
		ORDER BY sh.idx LIMIT 1 FOR UPDATE SKIP LOCKED) p
	WHERE NOT EXISTS (SELECT 1 FROM exp)
	LIMIT 1
),
pick AS (SELECT run_id, idx FROM exp UNION ALL SELECT run_id, idx FROM pend LIMIT 1),
u AS (
	UPDATE precog_run_shards s SET state = 'running', attempts = s.attempts + 1, worker = $2,
		lease_until = now() + $3::bigint * interval '1 microsecond', claimed_at = now(),
		worker2 = NULL, lease2_until = NULL, claimed2_at = NULL, updated_at = now()
	FROM pick WHERE s.run_id = pick.run_id AND s.idx = pick.idx
	RETURNING s.*
),
started AS (
	UPDATE precog_runs r SET state = 'running', updated_at = now()
	FROM u WHERE r.id = u.run_id AND r.state = 'pending'
)
SELECT ` + shardCols + `, false,
	r.id, r.job, r.version, r.params, r.params_key, r.spec_hash, r.model_version,
	r.pool, r.priority, r.state, r.error, r.shards, r.spec, r.spec_file, r.created_at, r.updated_at, r.retries
FROM u s JOIN precog_runs r ON r.id = s.run_id`

var (
	claimRunSQL = fmt.Sprintf(claimSQL, `r.id = $1`)
	// A backfill's waiting run (not admitted: its backfill has as many
	// runs in flight as it allows) is not claimable from the pool.
	claimPoolSQL = fmt.Sprintf(claimSQL, `r.pool = $1 AND r.id <> ALL($4::text[]) AND NOT EXISTS (SELECT 1 FROM precog_backfill_runs w WHERE w.run_id = r.id AND NOT w.admitted)`)
)

// speculateSQL leases a straggler to a second worker: a running shard of a
// run with nothing pending whose attempt has run longer than $4 times the
// run's median committed shard time. $1 pool, $2 worker, $3 lease, $5 the
// runs to pass over.
const speculateSQL = `
WITH cand AS MATERIALIZED (
	SELECT r.id, r.priority,
		(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY c.run_ms) FROM precog_run_shards c
		 WHERE c.run_id = r.id AND c.state = 'committed' AND c.run_ms IS NOT NULL) AS med
	FROM precog_runs r
	WHERE r.pool = $1 AND r.state = 'running' AND r.id <> ALL($5::text[])
		AND NOT EXISTS (SELECT 1 FROM precog_run_shards p WHERE p.run_id = r.id AND p.state = 'pending')
),
pick AS (
	SELECT sh.run_id, sh.idx FROM precog_run_shards sh JOIN cand ON cand.id = sh.run_id
	WHERE sh.state = 'running' AND sh.worker2 IS NULL AND sh.worker <> $2 AND sh.lease_until > now()
		AND cand.med IS NOT NULL AND now() - sh.claimed_at > cand.med * $4::float8 * interval '1 millisecond'
	ORDER BY cand.priority DESC, sh.claimed_at
	LIMIT 1 FOR UPDATE OF sh SKIP LOCKED
),
u AS (
	UPDATE precog_run_shards s SET attempts = s.attempts + 1, worker2 = $2,
		lease2_until = now() + $3::bigint * interval '1 microsecond', claimed2_at = now(), updated_at = now()
	FROM pick WHERE s.run_id = pick.run_id AND s.idx = pick.idx
	RETURNING s.*
)
SELECT s.run_id, s.idx, s.plan, s.est_rows, s.state, s.attempts, s.worker2, s.lease2_until,
	s.rows_in, s.rows_out, s.rejected, s.key_sketch, s.error, s.updated_at, true,
	r.id, r.job, r.version, r.params, r.params_key, r.spec_hash, r.model_version,
	r.pool, r.priority, r.state, r.error, r.shards, r.spec, r.spec_file, r.created_at, r.updated_at, r.retries
FROM u s JOIN precog_runs r ON r.id = s.run_id`

// scanClaim reads a claim statement's row: the leased shard and its run
// (without counts, which a claimer does not need).
func scanClaim(row pgx.Row) (jobs.Run, jobs.Shard, error) {
	var s jobs.Shard
	var r jobs.Run
	var sstate, rstate string
	var lease *time.Time
	var plan []byte
	err := row.Scan(&s.RunID, &s.Index, &plan, &s.EstRows, &sstate, &s.Attempts, &s.Worker, &lease,
		&s.Counts.RowsIn, &s.Counts.RowsOut, &s.Counts.Rejected, &s.Counts.KeySketch, &s.Error, &s.UpdatedAt, &s.Speculative,
		&r.ID, &r.Job, &r.Version, &r.Params, &r.ParamsKey, &r.SpecHash, &r.ModelVersion,
		&r.Pool, &r.Priority, &rstate, &r.Error, &r.Shards, &r.Spec, &r.SpecFile, &r.CreatedAt, &r.UpdatedAt, &r.Retries)
	if err != nil {
		return r, s, err
	}
	s.State, r.State = jobs.ShardState(sstate), jobs.RunState(rstate)
	if plan != nil {
		s.Plan = plan
	}
	if lease != nil {
		s.LeaseUntil = lease.UTC()
	}
	if r.State == jobs.RunPending { // the statement's snapshot predates its own update
		r.State = jobs.RunRunning
	}
	s.UpdatedAt, r.CreatedAt, r.UpdatedAt = s.UpdatedAt.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, s, nil
}

// Claim leases a shard of one run: an expired lease first, else the lowest
// pending index.
func (l *Ledger) Claim(ctx context.Context, runID, worker string, lease time.Duration) (jobs.Shard, error) {
	if worker == "" {
		return jobs.Shard{}, errors.New("ledger: claim: empty worker name")
	}
	_, s, err := scanClaim(l.pool.QueryRow(ctx, claimRunSQL, runID, worker, micros(lease)))
	if errors.Is(err, pgx.ErrNoRows) {
		r, rerr := l.Run(ctx, runID)
		switch {
		case rerr != nil:
			return s, fmt.Errorf("ledger: claim by %s: %w", worker, rerr)
		case r.State.Terminal():
			return s, fmt.Errorf("ledger: claim by %s: run %s is %s: %w", worker, runID, r.State, ledger.ErrRunFinished)
		}
		return s, fmt.Errorf("ledger: claim by %s: run %s: %w", worker, runID, ledger.ErrNoShard)
	}
	if err != nil {
		return s, fmt.Errorf("ledger: claim of run %s by %s: %w", runID, worker, err)
	}
	return s, nil
}

// ClaimNext implements ledger.Cluster.
func (l *Ledger) ClaimNext(ctx context.Context, p ledger.ClaimNextParams) (jobs.Run, jobs.Shard, error) {
	pool, worker, lease, skip := p.Pool, p.Worker, p.Lease, p.Skip
	if worker == "" {
		return jobs.Run{}, jobs.Shard{}, errors.New("ledger: claim: empty worker name")
	}
	if skip == nil {
		skip = []string{} // <> ALL(NULL) would pass over every run
	}
	r, s, err := scanClaim(l.pool.QueryRow(ctx, claimPoolSQL, pool, worker, micros(lease), skip))
	if errors.Is(err, pgx.ErrNoRows) {
		r, s, err = scanClaim(l.pool.QueryRow(ctx, speculateSQL, pool, worker, micros(lease), float64(ledger.StragglerFactor), skip))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return r, s, fmt.Errorf("ledger: claim in pool %s by %s: %w", pool, worker, ledger.ErrNoShard)
	}
	if err != nil {
		return r, s, fmt.Errorf("ledger: claim in pool %s by %s: %w", pool, worker, err)
	}
	return r, s, nil
}

// holds is the fencing predicate: worker holds a live lease on the shard
// (as its primary or its speculative holder) of a run that is not terminal.
const holds = `s.run_id = $1 AND s.idx = $2 AND s.state = 'running'
	AND ((s.worker = $3 AND s.lease_until > now()) OR (s.worker2 = $3 AND s.lease2_until > now()))
	AND EXISTS (SELECT 1 FROM precog_runs r WHERE r.id = $1 AND r.state IN ` + openStates + `)`

// holdsLocked is holds for a commit: it takes the run's row FOR SHARE, so
// a commit and a change of the run's state (failed, cancelled: an UPDATE
// of that row) are ordered. Without it a commit whose statement began
// while the run was open could land after the run had failed (READ
// COMMITTED: the subquery saw the open state, and the two statements touch
// different rows): a committed shard in a failed run whose sinks were
// already aborted. With it the commit waits for the state change and then
// sees the run terminal, or the state change waits for the commit.
const holdsLocked = `s.run_id = $1 AND s.idx = $2 AND s.state = 'running'
	AND ((s.worker = $3 AND s.lease_until > now()) OR (s.worker2 = $3 AND s.lease2_until > now()))
	AND EXISTS (SELECT 1 FROM precog_runs r WHERE r.id = $1 AND r.state IN ` + openStates + ` FOR SHARE)`

// Heartbeat extends worker's lease on the shard to now+lease.
func (l *Ledger) Heartbeat(ctx context.Context, p ledger.HeartbeatParams) error {
	runID, shard, worker, lease := p.RunID, p.Shard, p.Worker, p.Lease
	tag, err := l.pool.Exec(ctx, `UPDATE precog_run_shards s SET
		lease_until = CASE WHEN s.worker = $3 THEN now() + $4::bigint * interval '1 microsecond' ELSE s.lease_until END,
		lease2_until = CASE WHEN s.worker2 = $3 THEN now() + $4::bigint * interval '1 microsecond' ELSE s.lease2_until END,
		updated_at = now()
		WHERE `+holds, runID, shard, worker, micros(lease))
	if err != nil {
		return fmt.Errorf("ledger: heartbeat of run %s shard %d by %s: %w", runID, shard, worker, err)
	}
	if tag.RowsAffected() == 0 {
		return l.refused(ctx, "heartbeat", runID, shard, worker)
	}
	return nil
}

// Complete commits the shard with its counts and reject sample, fenced by
// the lease; the first of two speculative holders to complete wins and
// voids the other's lease. The attempt's rejects replace the shard's
// earlier ones in precog_rejects in the same transaction, up to the
// per-run cap (Options.RejectsPerRun): a commit without rejects is one
// statement.
func (l *Ledger) Complete(ctx context.Context, p ledger.CompleteParams) error {
	runID, shard, worker, c, sample := p.RunID, p.Shard, p.Worker, p.Counts, p.Sample
	var rejects []byte // NULL when the attempt rejected nothing
	if capped := jobs.CapSample(shard, sample); len(capped) > 0 {
		var err error
		if rejects, err = json.Marshal(capped); err != nil {
			return fmt.Errorf("ledger: complete run %s shard %d by %s: reject sample: %w", runID, shard, worker, err)
		}
	}
	const commit = `UPDATE precog_run_shards s SET state = 'committed',
		rows_in = $4, rows_out = $5, rejected = $6, key_sketch = $7, reject_sample = $8::jsonb, cost = $9::jsonb, error = '',
		run_ms = extract(epoch FROM now() - CASE WHEN s.worker = $3 THEN s.claimed_at ELSE s.claimed2_at END) * 1000,
		worker = $3, lease_until = NULL, worker2 = NULL, lease2_until = NULL, claimed2_at = NULL, updated_at = now()
		WHERE ` + holdsLocked
	cost, err := costJSON(p.Cost)
	if err != nil {
		return fmt.Errorf("ledger: complete run %s shard %d by %s: cost: %w", runID, shard, worker, err)
	}
	args := []any{runID, shard, worker, c.RowsIn, c.RowsOut, c.Rejected, c.KeySketch, rejects, cost}
	committed := false
	if len(sample) == 0 && p.Profile == "" {
		var n int
		err = l.pool.QueryRow(ctx, `WITH u AS (`+commit+` RETURNING 1),
			d AS (DELETE FROM precog_rejects WHERE run_id = $1 AND shard = $2 AND EXISTS (SELECT 1 FROM u))
			SELECT count(*) FROM u`, args...).Scan(&n)
		committed = n > 0
	} else {
		err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, commit, args...)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			committed = true
			if p.Profile != "" {
				if _, err := tx.Exec(ctx, `INSERT INTO precog_shard_profiles (run_id, idx, profile) VALUES ($1, $2, $3)
					ON CONFLICT (run_id, idx) DO UPDATE SET profile = EXCLUDED.profile`, runID, shard, p.Profile); err != nil {
					return err
				}
			}
			return l.storeRejects(ctx, tx, runID, shard, sample)
		})
	}
	if err != nil {
		return fmt.Errorf("ledger: complete run %s shard %d by %s: %w", runID, shard, worker, err)
	}
	if !committed {
		return l.refused(ctx, "complete", runID, shard, worker)
	}
	return nil
}

// rejectsLock is the first key of the two-key advisory lock that
// serialises the reject stores of one run's commits (the second is the
// run id's hash), so that the per-run cap holds under concurrent commits.
const rejectsLock = 0x72656a

// storeRejects replaces shard's stored rejects by rs (made safe by
// jobs.NewReject, ordered by position), keeping the run within its cap.
func (l *Ledger) storeRejects(ctx context.Context, tx pgx.Tx, runID string, shard int, rs []jobs.Reject) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(rejectsLock), runID); err != nil {
		return fmt.Errorf("lock rejects: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM precog_rejects WHERE run_id = $1 AND shard = $2`, runID, shard); err != nil {
		return fmt.Errorf("replace rejects: %w", err)
	}
	var stored int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM precog_rejects WHERE run_id = $1`, runID).Scan(&stored); err != nil {
		return fmt.Errorf("count rejects: %w", err)
	}
	keep := jobs.SafeRejects(shard, rs, l.opts.RejectsPerRun-stored)
	if len(keep) == 0 {
		return nil
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"precog_rejects"}, []string{"run_id", "shard", "n", "key", "position", "reason"},
		pgx.CopyFromSlice(len(keep), func(i int) ([]any, error) {
			r := keep[i]
			return []any{runID, shard, i, r.Key, r.Position, r.Reason}, nil
		}))
	if err != nil {
		return fmt.Errorf("store rejects: %w", err)
	}
	return nil
}

// refused explains why worker's call on a shard changed nothing: no such
// run or shard, a terminal run, or a lease it does not hold.
func (l *Ledger) refused(ctx context.Context, op, runID string, shard int, worker string) error {
	var rstate string
	var sstate, holder, holder2 *string
	err := l.pool.QueryRow(ctx, `SELECT r.state, s.state, s.worker, s.worker2 FROM precog_runs r
		LEFT JOIN precog_run_shards s ON s.run_id = r.id AND s.idx = $2 WHERE r.id = $1`, runID, shard).
		Scan(&rstate, &sstate, &holder, &holder2)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("ledger: %s by %s: run %s: %w", op, worker, runID, ledger.ErrNotFound)
	case err != nil:
		return fmt.Errorf("ledger: %s of run %s shard %d by %s: %w", op, runID, shard, worker, err)
	case sstate == nil:
		return fmt.Errorf("ledger: %s by %s: run %s shard %d: %w", op, worker, runID, shard, ledger.ErrNotFound)
	case jobs.RunState(rstate).Terminal():
		return fmt.Errorf("ledger: %s of run %s shard %d by %s: the run is %s: %w (%w)", op, runID, shard, worker, rstate, ledger.ErrRunFinished, ledger.ErrLeaseLost)
	}
	return fmt.Errorf("ledger: %s of run %s shard %d by %s: shard is %s, held by %q%s: %w",
		op, runID, shard, worker, *sstate, deref(holder), alsoHeld(holder2), ledger.ErrLeaseLost)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func alsoHeld(s *string) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf(" and %q", *s)
}

// Fail records an attempt's error. When another holder of the shard (a
// speculative attempt) is alive, only worker's lease ends and the shard
// keeps running under the other; else the shard goes back to pending (and
// the pool wakes) while attempts remain and retry is set, or to failed.
func (l *Ledger) Fail(ctx context.Context, p ledger.FailParams) error {
	runID, shard, worker, msg, retry, maxAttempts := p.RunID, p.Shard, p.Worker, p.Msg, p.Retry, p.MaxAttempts
	return l.endAttempt(ctx, "fail", runID, shard, worker, func(attempts int) (string, int, string) {
		if retry && attempts < maxAttempts {
			return "pending", attempts, msg
		}
		return "failed", attempts, msg
	})
}

// Release returns the shard to pending without counting the attempt.
func (l *Ledger) Release(ctx context.Context, p ledger.ReleaseParams) error {
	runID, shard, worker := p.RunID, p.Shard, p.Worker
	return l.endAttempt(ctx, "release", runID, shard, worker, func(attempts int) (string, int, string) {
		return "pending", max(attempts-1, 0), ""
	})
}

// endAttempt ends worker's lease on a shard under a row lock. next gives
// the shard's state, attempts and error when worker was its only live
// holder; msg "" keeps the previous error.
func (l *Ledger) endAttempt(ctx context.Context, op, runID string, shard int, worker string,
	next func(attempts int) (state string, newAttempts int, msg string)) error {
	refused := false
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var attempts int
		var primary, otherLive bool
		var pool string
		err := tx.QueryRow(ctx, `SELECT s.attempts, coalesce(s.worker = $3 AND s.lease_until > now(), false),
			CASE WHEN s.worker = $3 THEN coalesce(s.lease2_until > now(), false) ELSE coalesce(s.lease_until > now(), false) END,
			(SELECT pool FROM precog_runs WHERE id = $1)
			FROM precog_run_shards s WHERE `+holds+` FOR UPDATE OF s`, runID, shard, worker).Scan(&attempts, &primary, &otherLive, &pool)
		if errors.Is(err, pgx.ErrNoRows) {
			refused = true
			return nil
		}
		if err != nil {
			return err
		}
		if otherLive {
			// The other attempt carries on: drop worker's lease only.
			q := `UPDATE precog_run_shards SET worker2 = NULL, lease2_until = NULL, claimed2_at = NULL, updated_at = now() WHERE run_id = $1 AND idx = $2`
			if primary {
				q = `UPDATE precog_run_shards SET worker = worker2, lease_until = lease2_until, claimed_at = claimed2_at,
					worker2 = NULL, lease2_until = NULL, claimed2_at = NULL, updated_at = now() WHERE run_id = $1 AND idx = $2`
			}
			_, err := tx.Exec(ctx, q, runID, shard)
			return err
		}
		state, n, msg := next(attempts)
		if _, err := tx.Exec(ctx, `UPDATE precog_run_shards SET state = $3, attempts = $4,
			error = CASE WHEN $5 = '' THEN error ELSE $5 END, lease_until = NULL, worker2 = NULL, lease2_until = NULL,
			claimed2_at = NULL, worker = NULL, updated_at = now()
			WHERE run_id = $1 AND idx = $2`, runID, shard, state, n, msg); err != nil {
			return err
		}
		if state == "pending" {
			return notify(ctx, tx, pool)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: %s run %s shard %d by %s: %w", op, runID, shard, worker, err)
	}
	if refused {
		if err := l.letGo(ctx, runID, shard, worker); err != nil {
			return fmt.Errorf("ledger: %s run %s shard %d by %s: %w", op, runID, shard, worker, err)
		}
		return l.refused(ctx, op, runID, shard, worker)
	}
	return nil
}

// letGo clears worker's lease mark on a shard of a cancelled run: the
// holder stopped, which `precog cancel` waits for.
func (l *Ledger) letGo(ctx context.Context, runID string, shard int, worker string) error {
	_, err := l.pool.Exec(ctx, `UPDATE precog_run_shards s SET
		lease_until = CASE WHEN s.worker = $3 THEN NULL ELSE s.lease_until END,
		worker2 = CASE WHEN s.worker2 = $3 THEN NULL ELSE s.worker2 END,
		lease2_until = CASE WHEN s.worker2 = $3 THEN NULL ELSE s.lease2_until END,
		updated_at = now()
		WHERE s.run_id = $1 AND s.idx = $2 AND s.state = 'failed' AND (s.worker = $3 OR s.worker2 = $3)
			AND (s.lease_until IS NOT NULL OR s.lease2_until IS NOT NULL)
			AND EXISTS (SELECT 1 FROM precog_runs r WHERE r.id = $1 AND r.state = 'cancelled')`, runID, shard, worker)
	return err
}
