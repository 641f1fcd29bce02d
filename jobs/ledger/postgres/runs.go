package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// lockOpenRun locks a run's row inside tx and checks that it is not
// terminal, returning its pool.
func lockOpenRun(ctx context.Context, tx pgx.Tx, runID string) (pool string, state jobs.RunState, err error) {
	var st string
	err = tx.QueryRow(ctx, `SELECT pool, state FROM precog_runs WHERE id = $1 FOR UPDATE`, runID).Scan(&pool, &st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("run %s: %w", runID, ledger.ErrNotFound)
	}
	if err != nil {
		return "", "", err
	}
	if state = jobs.RunState(st); state.Terminal() {
		return pool, state, fmt.Errorf("run %s is %s: %w", runID, state, ledger.ErrRunFinished)
	}
	return pool, state, nil
}

// SetRunState moves a non-terminal run to state with msg as its error. A
// cancelled or failed run wakes its pool so workers stop its shards (their
// heartbeats now fail). Cancel is refused (ErrPublishing) while a worker
// holds the run's publish step, and moves the run's open shards to failed,
// all under the run's row lock.
func (l *Ledger) SetRunState(ctx context.Context, runID string, state jobs.RunState, msg string) error {
	switch state {
	case jobs.RunPending, jobs.RunRunning, jobs.RunPublishing, jobs.RunSucceeded, jobs.RunFailed, jobs.RunCancelled:
	default:
		return fmt.Errorf("ledger: set run %s state: unknown state %q", runID, state)
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		pool, cur, err := lockOpenRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if state == jobs.RunCancelled && cur == jobs.RunPublishing {
			var publisher *string
			if err := tx.QueryRow(ctx, `SELECT publisher FROM precog_runs WHERE id = $1`, runID).Scan(&publisher); err != nil {
				return err
			}
			if publisher != nil {
				return fmt.Errorf("run %s: worker %s is publishing it: %w", runID, *publisher, ledger.ErrPublishing)
			}
		}
		if state == jobs.RunCancelled {
			// The open shards end with the run; a holder's lease mark stays
			// until it stops (endAttempt clears it).
			if _, err := tx.Exec(ctx, `UPDATE precog_run_shards SET state = 'failed', error = $2, updated_at = now()
				WHERE run_id = $1 AND state IN ('pending', 'running')`, runID, msg); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE precog_runs SET state = $2, error = $3, updated_at = now(),
			publisher = CASE WHEN $2 IN ('publishing') THEN publisher END,
			publish_until = CASE WHEN $2 IN ('publishing') THEN publish_until END
			WHERE id = $1`, runID, string(state), msg); err != nil {
			return err
		}
		if state == jobs.RunCancelled || state == jobs.RunFailed {
			return notify(ctx, tx, pool)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: set run %s state %s: %w", runID, state, err)
	}
	return nil
}

// RetryFailed moves the run's failed shards back to pending with zero
// attempts and wakes the pool.
func (l *Ledger) RetryFailed(ctx context.Context, runID string) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		pool, err := runPool(ctx, tx, runID)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE precog_run_shards SET state = 'pending', attempts = 0, error = '', worker = NULL,
			lease_until = NULL, worker2 = NULL, lease2_until = NULL, updated_at = now()
			WHERE run_id = $1 AND state = 'failed'`, runID)
		if err != nil {
			return err
		}
		if n = int(tag.RowsAffected()); n > 0 {
			return notify(ctx, tx, pool)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ledger: retry failed shards of run %s: %w", runID, err)
	}
	return n, nil
}

// Reopen moves committed shards of an open run back to pending (a sink lost
// them), ends a publish step in progress and wakes the pool.
func (l *Ledger) Reopen(ctx context.Context, runID string, shards []int, reason string) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		pool, _, err := lockOpenRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		idx := make([]int32, len(shards))
		for i, s := range shards {
			idx[i] = int32(s)
		}
		if _, err := tx.Exec(ctx, `UPDATE precog_run_shards SET state = 'pending', attempts = 0, rows_in = 0, rows_out = 0,
			rejected = 0, key_sketch = '', cost = NULL, run_ms = NULL, error = $3, worker = NULL, lease_until = NULL, updated_at = now()
			WHERE run_id = $1 AND idx = ANY($2) AND state = 'committed'`, runID, idx, reason); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE precog_runs SET updated_at = now(), publisher = NULL, publish_until = NULL,
			state = CASE WHEN state = 'publishing' THEN 'running' ELSE state END WHERE id = $1`, runID); err != nil {
			return err
		}
		return notify(ctx, tx, pool)
	})
	if err != nil {
		return fmt.Errorf("ledger: reopen shards %v of run %s: %w", shards, runID, err)
	}
	return nil
}

// allCommitted is true when a run has no shard that is not committed.
const allCommitted = `NOT EXISTS (SELECT 1 FROM precog_run_shards s WHERE s.run_id = r.id AND s.state <> 'committed')`

// ClaimPublish implements ledger.Cluster.
func (l *Ledger) ClaimPublish(ctx context.Context, p ledger.PublishLeaseParams) (jobs.Run, error) {
	runID, worker, lease := p.RunID, p.Worker, p.Lease
	if worker == "" {
		return jobs.Run{}, errors.New("ledger: claim publish: empty worker name")
	}
	tag, err := l.pool.Exec(ctx, `UPDATE precog_runs r SET state = 'publishing', publisher = $2,
		publish_until = now() + $3::bigint * interval '1 microsecond', publish_attempts = r.publish_attempts + 1, updated_at = now()
		WHERE r.id = $1 AND r.state IN `+openStates+` AND (r.publisher IS NULL OR r.publish_until <= now()) AND `+allCommitted,
		runID, worker, micros(lease))
	if err != nil {
		return jobs.Run{}, fmt.Errorf("ledger: claim publish of run %s by %s: %w", runID, worker, err)
	}
	r, err := l.Run(ctx, runID)
	if err != nil {
		return r, fmt.Errorf("ledger: claim publish by %s: %w", worker, err)
	}
	if tag.RowsAffected() == 0 {
		if r.State.Terminal() {
			return r, fmt.Errorf("ledger: claim publish of run %s by %s: the run is %s: %w", runID, worker, r.State, ledger.ErrRunFinished)
		}
		return r, fmt.Errorf("ledger: claim publish of run %s by %s: shards not all committed, or another worker publishes: %w", runID, worker, ledger.ErrNoShard)
	}
	return r, nil
}

// publishHeld is the publish lease's fencing predicate ($1 run, $2 worker).
const publishHeld = `id = $1 AND state = 'publishing' AND publisher = $2 AND publish_until > now()`

// HeartbeatPublish implements ledger.Cluster.
func (l *Ledger) HeartbeatPublish(ctx context.Context, p ledger.PublishLeaseParams) error {
	runID, worker, lease := p.RunID, p.Worker, p.Lease
	tag, err := l.pool.Exec(ctx, `UPDATE precog_runs SET publish_until = now() + $3::bigint * interval '1 microsecond',
		updated_at = now() WHERE `+publishHeld, runID, worker, micros(lease))
	if err != nil {
		return fmt.Errorf("ledger: heartbeat publish of run %s by %s: %w", runID, worker, err)
	}
	if tag.RowsAffected() == 0 {
		return l.publishRefused(ctx, "heartbeat publish", runID, worker)
	}
	return nil
}

// FinishPublish implements ledger.Cluster.
func (l *Ledger) FinishPublish(ctx context.Context, p ledger.FinishPublishParams) error {
	runID, worker, state, msg := p.RunID, p.Worker, p.State, p.Msg
	if !state.Terminal() {
		return fmt.Errorf("ledger: finish publish of run %s by %s: state %q is not terminal", runID, worker, state)
	}
	tag, err := l.pool.Exec(ctx, `UPDATE precog_runs SET state = $3, error = $4, publisher = NULL, publish_until = NULL,
		updated_at = now() WHERE `+publishHeld, runID, worker, string(state), msg)
	if err != nil {
		return fmt.Errorf("ledger: finish publish of run %s by %s: %w", runID, worker, err)
	}
	if tag.RowsAffected() == 0 {
		return l.publishRefused(ctx, "finish publish", runID, worker)
	}
	return nil
}

func (l *Ledger) publishRefused(ctx context.Context, op, runID, worker string) error {
	var state string
	var publisher *string
	err := l.pool.QueryRow(ctx, `SELECT state, publisher FROM precog_runs WHERE id = $1`, runID).Scan(&state, &publisher)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("ledger: %s by %s: run %s: %w", op, worker, runID, ledger.ErrNotFound)
	case err != nil:
		return fmt.Errorf("ledger: %s of run %s by %s: %w", op, runID, worker, err)
	case jobs.RunState(state).Terminal():
		return fmt.Errorf("ledger: %s of run %s by %s: the run is %s: %w (%w)", op, runID, worker, state, ledger.ErrRunFinished, ledger.ErrLeaseLost)
	}
	return fmt.Errorf("ledger: %s of run %s by %s: run is %s, publish held by %q: %w", op, runID, worker, state, deref(publisher), ledger.ErrLeaseLost)
}

// PublishDue implements ledger.Cluster.
func (l *Ledger) PublishDue(ctx context.Context, pool string) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT r.id FROM precog_runs r WHERE r.pool = $1 AND r.state IN `+openStates+`
		AND (r.publisher IS NULL OR r.publish_until <= now()) AND `+allCommitted+`
		ORDER BY r.priority DESC, r.created_at, r.id`, pool)
	if err != nil {
		return nil, fmt.Errorf("ledger: runs due to publish in pool %s: %w", pool, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ledger: runs due to publish in pool %s: %w", pool, err)
	}
	return ids, nil
}

// runPool is the pool of run runID (ledger.ErrNotFound when there is no
// such run).
func runPool(ctx context.Context, tx pgx.Tx, runID string) (string, error) {
	var pool string
	err := tx.QueryRow(ctx, `SELECT pool FROM precog_runs WHERE id = $1`, runID).Scan(&pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("run %s: %w", runID, ledger.ErrNotFound)
	}
	return pool, err
}

// RetryRun takes a failed run back up: the run goes back to running with
// its error cleared and its Retries counted up (workers prepare its sinks
// again), its failed shards to pending with attempts reset, and its pool
// is woken; committed shards are kept. Its pending cleanup, if any, is
// deleted in the same transaction, so the staged data it kept is the
// retried run's again and no worker removes it (a claim live on it is
// ErrCleaning, and nothing changes); a sink that lost shards (the cleanup
// ran, or the failure aborted it) reports them at stage time, and they are
// recomputed. It returns the shards moved. A succeeded or cancelled run is
// ErrRunFinished; when (job, params) has another open run meanwhile, an
// *OpenRunError names it.
func (l *Ledger) RetryRun(ctx context.Context, runID string) (int, error) {
	var re reopened
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var err error
		re, err = retryRunTx(ctx, tx, runID)
		return err
	})
	if err := l.retryRunError(ctx, "retry run "+runID, re, err); err != nil {
		return 0, err
	}
	if re.open { // open already: just its failed shards
		return l.RetryFailed(ctx, runID)
	}
	return re.moved, nil
}

// reopened is what retryRunTx did: the shards it moved, and the run's job
// and params key (to name an open run of them); open when the run was
// open already and nothing changed.
type reopened struct {
	moved          int
	job, paramsKey string
	open           bool
}

// retryRunTx is RetryRun inside tx: it locks run runID's row and, when the
// run failed, reopens it (see RetryRun) and wakes its pool.
func retryRunTx(ctx context.Context, tx pgx.Tx, runID string) (reopened, error) {
	var re reopened
	var pool string
	var state jobs.RunState
	err := tx.QueryRow(ctx, `SELECT pool, state, job, params_key FROM precog_runs WHERE id = $1 FOR UPDATE`, runID).Scan(&pool, &state, &re.job, &re.paramsKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return re, fmt.Errorf("run %s: %w", runID, ledger.ErrNotFound)
	}
	if err != nil {
		return re, err
	}
	if state != jobs.RunFailed {
		if state.Terminal() {
			return re, fmt.Errorf("run %s is %s: %w", runID, state, ledger.ErrRunFinished)
		}
		re.open = true
		return re, nil
	}
	if err := takeBackCleanup(ctx, tx, runID); err != nil {
		return re, err
	}
	if _, err := tx.Exec(ctx, `UPDATE precog_runs SET state = 'running', error = '', publisher = NULL, publish_until = NULL,
		retries = retries + 1, updated_at = now() WHERE id = $1`, runID); err != nil {
		return re, err
	}
	tag, err := tx.Exec(ctx, `UPDATE precog_run_shards SET state = 'pending', attempts = 0, error = '', worker = NULL,
		lease_until = NULL, worker2 = NULL, lease2_until = NULL, updated_at = now()
		WHERE run_id = $1 AND state IN ('failed', 'running')`, runID)
	if err != nil {
		return re, err
	}
	re.moved = int(tag.RowsAffected())
	return re, notify(ctx, tx, pool)
}

// retryRunError wraps err, the error of a transaction that reopened a
// run (re) for op, naming the open run of its job and params that the
// reopening collided with.
func (l *Ledger) retryRunError(ctx context.Context, op string, re reopened, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "precog_runs_open_key" {
		if open, oerr := l.OpenRun(ctx, re.job, re.paramsKey); oerr == nil {
			return fmt.Errorf("ledger: %s: %w", op, &ledger.OpenRunError{Job: re.job, ParamsKey: re.paramsKey, RunID: open.ID, State: open.State})
		}
		return fmt.Errorf("ledger: %s: job %s has another open run: %w", op, re.job, ledger.ErrRunOpen)
	}
	if err != nil {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	return nil
}

// JobNames lists every job that has a run in the ledger, by name: the
// dashboard's jobs page lists them without reading every run.
func (l *Ledger) JobNames(ctx context.Context) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT DISTINCT job FROM precog_runs ORDER BY job`)
	if err != nil {
		return nil, fmt.Errorf("ledger: job names: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ledger: job names: %w", err)
	}
	return names, nil
}

// takeBackCleanup deletes the pending cleanup of a failed run being
// reopened (its row locked by the caller), unless a holder's claim on it
// is live: that holder is removing the run's data now (ErrCleaning).
func takeBackCleanup(ctx context.Context, tx pgx.Tx, runID string) error {
	var holder *string
	err := tx.QueryRow(ctx, `SELECT holder FROM precog_cleanups WHERE run_id = $1 AND held_until > now() FOR UPDATE`, runID).Scan(&holder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	default:
		return fmt.Errorf("%s is removing its staged data from its sinks: %w", deref(holder), ledger.ErrCleaning)
	}
	_, err = tx.Exec(ctx, `DELETE FROM precog_cleanups WHERE run_id = $1`, runID)
	return err
}
