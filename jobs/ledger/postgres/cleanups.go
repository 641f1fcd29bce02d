package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs/ledger"
)

var _ ledger.Cleanups = (*Ledger)(nil)

// AddCleanup implements ledger.Cleanups.
func (l *Ledger) AddCleanup(ctx context.Context, runID, reason string) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		pool, err := runPool(ctx, tx, runID)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO precog_cleanups (run_id, pool, reason) VALUES ($1, $2, $3)
			ON CONFLICT (run_id) DO UPDATE SET reason = EXCLUDED.reason`, runID, pool, reason); err != nil {
			return err
		}
		return notify(ctx, tx, pool)
	})
	if err != nil {
		return fmt.Errorf("ledger: record the pending cleanup of run %s: %w", runID, err)
	}
	return nil
}

// CleanupsDue implements ledger.Cleanups.
func (l *Ledger) CleanupsDue(ctx context.Context, pool string, limit int) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT run_id FROM precog_cleanups WHERE pool = $1 ORDER BY created_at, run_id LIMIT $2`, pool, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: list pending cleanups of pool %s: %w", pool, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ledger: list pending cleanups of pool %s: %w", pool, err)
	}
	return ids, nil
}

// CleanupDone implements ledger.Cleanups.
func (l *Ledger) CleanupDone(ctx context.Context, runID string) error {
	if _, err := l.pool.Exec(ctx, `DELETE FROM precog_cleanups WHERE run_id = $1`, runID); err != nil {
		return fmt.Errorf("ledger: clear the pending cleanup of run %s: %w", runID, err)
	}
	return nil
}
