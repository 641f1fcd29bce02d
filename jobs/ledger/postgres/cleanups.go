package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

var _ ledger.Cleanups = (*Ledger)(nil)

// AddCleanup implements ledger.Cleanups. The run's row is locked, so a
// RetryRun either reopened it before (ErrRunOpen here) or sees the record.
func (l *Ledger) AddCleanup(ctx context.Context, p ledger.CleanupParams) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var pool string
		var state jobs.RunState
		err := tx.QueryRow(ctx, `SELECT pool, state FROM precog_runs WHERE id = $1 FOR UPDATE`, p.RunID).Scan(&pool, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("run %s: %w", p.RunID, ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if state != jobs.RunFailed && state != jobs.RunCancelled {
			return fmt.Errorf("run %s is %s, its data in use: %w", p.RunID, state, ledger.ErrRunOpen)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO precog_cleanups (run_id, pool, reason, not_before)
			VALUES ($1, $2, $3, now() + $4::bigint * interval '1 microsecond')
			ON CONFLICT (run_id) DO UPDATE SET reason = EXCLUDED.reason, not_before = EXCLUDED.not_before,
			holder = NULL, held_until = NULL`, p.RunID, pool, p.Reason, max(p.DueIn, 0).Microseconds()); err != nil {
			return err
		}
		return notify(ctx, tx, pool)
	})
	if err != nil {
		return fmt.Errorf("ledger: record the pending cleanup of run %s: %w", p.RunID, err)
	}
	return nil
}

// CleanupsDue implements ledger.Cleanups.
func (l *Ledger) CleanupsDue(ctx context.Context, pool string, limit int) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT run_id FROM precog_cleanups
		WHERE pool = $1 AND not_before <= now() AND (holder IS NULL OR held_until <= now())
		ORDER BY created_at, run_id LIMIT $2`, pool, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: list pending cleanups of pool %s: %w", pool, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ledger: list pending cleanups of pool %s: %w", pool, err)
	}
	return ids, nil
}

// PendingCleanup implements ledger.Cleanups.
func (l *Ledger) PendingCleanup(ctx context.Context, runID string) (ledger.Cleanup, error) {
	c := ledger.Cleanup{RunID: runID}
	var holder *string
	var heldUntil *time.Time
	// A row recorded before due times has not_before -infinity: due when
	// recorded.
	err := l.pool.QueryRow(ctx, `SELECT pool, reason, created_at, greatest(not_before, created_at), holder, held_until
		FROM precog_cleanups WHERE run_id = $1`, runID).Scan(&c.Pool, &c.Reason, &c.CreatedAt, &c.DueAt, &holder, &heldUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("ledger: pending cleanup of run %s: %w", runID, ledger.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("ledger: pending cleanup of run %s: %w", runID, err)
	}
	c.Holder = deref(holder)
	if heldUntil != nil {
		c.HeldUntil = *heldUntil
	}
	return c, nil
}

// BeginCleanup implements ledger.Cleanups: the run and its record are
// locked (in RetryRun's order), so a RetryRun either deleted the record
// before (no claim) or waits and then sees the live claim (ErrCleaning).
func (l *Ledger) BeginCleanup(ctx context.Context, p ledger.BeginCleanupParams) error {
	if p.Holder == "" || p.Lease <= 0 {
		return fmt.Errorf("ledger: claim the cleanup of run %s: a holder and a positive lease are needed", p.RunID)
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var state jobs.RunState
		var due, live bool
		var holder *string
		// The run's row first, as RetryRun and AddCleanup lock them.
		err := tx.QueryRow(ctx, `SELECT state FROM precog_runs WHERE id = $1 FOR UPDATE`, p.RunID).Scan(&state)
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT not_before <= now(), holder, coalesce(held_until > now(), false)
				FROM precog_cleanups WHERE run_id = $1 FOR UPDATE`, p.RunID).Scan(&due, &holder, &live)
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("no pending cleanup: %w", ledger.ErrNotFound)
		case err != nil:
			return err
		case state != jobs.RunFailed && state != jobs.RunCancelled:
			if _, err := tx.Exec(ctx, `DELETE FROM precog_cleanups WHERE run_id = $1`, p.RunID); err != nil {
				return err
			}
			return fmt.Errorf("the run is %s: its data is in use, not to clean (record dropped): %w", state, ledger.ErrNotFound)
		case !due:
			return fmt.Errorf("its cleanup is not due yet: %w", ledger.ErrNotFound)
		case live:
			return fmt.Errorf("%s holds it: %w", deref(holder), ledger.ErrCleaning)
		}
		_, err = tx.Exec(ctx, `UPDATE precog_cleanups SET holder = $2, held_until = now() + $3::bigint * interval '1 microsecond' WHERE run_id = $1`,
			p.RunID, p.Holder, p.Lease.Microseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: claim the cleanup of run %s for %s: %w", p.RunID, p.Holder, err)
	}
	return nil
}

// CleanupDone implements ledger.Cleanups.
func (l *Ledger) CleanupDone(ctx context.Context, p ledger.CleanupDoneParams) error {
	if p.Holder == "" {
		if _, err := l.pool.Exec(ctx, `DELETE FROM precog_cleanups WHERE run_id = $1`, p.RunID); err != nil {
			return fmt.Errorf("ledger: clear the pending cleanup of run %s: %w", p.RunID, err)
		}
		return nil
	}
	tag, err := l.pool.Exec(ctx, `DELETE FROM precog_cleanups WHERE run_id = $1 AND holder = $2`, p.RunID, p.Holder)
	if err != nil {
		return fmt.Errorf("ledger: clear the pending cleanup of run %s by %s: %w", p.RunID, p.Holder, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("ledger: clear the pending cleanup of run %s by %s: its claim is gone (the run was retried, or another holder took the cleanup over): %w",
			p.RunID, p.Holder, ledger.ErrLeaseLost)
	}
	return nil
}
