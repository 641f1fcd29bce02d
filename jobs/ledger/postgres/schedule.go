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

var _ ledger.Scheduler = (*Ledger)(nil)

// Lead implements ledger.Scheduler: one statement, on the database's clock.
func (l *Ledger) Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	var got string
	err := l.pool.QueryRow(ctx, `INSERT INTO precog_leaders AS p (name, holder, until)
		VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
		WHERE p.holder = EXCLUDED.holder OR p.until <= now()
		RETURNING holder`, name, holder, micros(ttl)).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ledger: lead %s as %s: %w", name, holder, err)
	}
	return true, nil
}

// Resign implements ledger.Scheduler.
func (l *Ledger) Resign(ctx context.Context, name, holder string) error {
	if _, err := l.pool.Exec(ctx, `DELETE FROM precog_leaders WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("ledger: resign %s as %s: %w", name, holder, err)
	}
	return nil
}

// RecordTick implements ledger.Scheduler: the tick row and the run commit
// together, and the tick's primary key makes a second leader's insert a
// no-op.
func (l *Ledger) RecordTick(ctx context.Context, t ledger.Tick, run *jobs.Run, shards []jobs.Shard) error {
	runID := ""
	if run != nil {
		runID = run.ID
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO precog_ticks (job, scheduled_for, outcome, run_id, reason)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, t.Job, t.ScheduledFor, t.Outcome, runID, t.Reason)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ledger.ErrTickExists
		}
		if run == nil {
			return nil
		}
		r := *run
		r.Pool = poolOf(r)
		return createRunTx(ctx, tx, r, shards)
	})
	if errors.Is(err, ledger.ErrTickExists) {
		return fmt.Errorf("ledger: tick %s@%s: %w", t.Job, t.ScheduledFor.Format(time.RFC3339), err)
	}
	if run != nil && err != nil {
		return l.createRunError(ctx, *run, err)
	}
	if err != nil {
		return fmt.Errorf("ledger: record tick %s@%s: %w", t.Job, t.ScheduledFor.Format(time.RFC3339), err)
	}
	return nil
}

// LastTick implements ledger.Scheduler.
func (l *Ledger) LastTick(ctx context.Context, job string) (ledger.Tick, error) {
	t := ledger.Tick{Job: job}
	err := l.pool.QueryRow(ctx, `SELECT scheduled_for, outcome, run_id, reason, recorded_at FROM precog_ticks
		WHERE job = $1 ORDER BY scheduled_for DESC LIMIT 1`, job).Scan(&t.ScheduledFor, &t.Outcome, &t.RunID, &t.Reason, &t.RecordedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("ledger: no tick of %s: %w", job, ledger.ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("ledger: last tick of %s: %w", job, err)
	}
	t.ScheduledFor, t.RecordedAt = t.ScheduledFor.UTC(), t.RecordedAt.UTC()
	return t, nil
}

// FirstSeen implements ledger.Scheduler: the first insert wins; the no-op
// update makes the statement return the recorded row either way.
func (l *Ledger) FirstSeen(ctx context.Context, job string, at time.Time) (time.Time, error) {
	var got time.Time
	err := l.pool.QueryRow(ctx, `INSERT INTO precog_jobs_seen AS s (job, first_seen) VALUES ($1, $2)
		ON CONFLICT (job) DO UPDATE SET first_seen = s.first_seen
		RETURNING first_seen`, job, at.UTC()).Scan(&got)
	if err != nil {
		return time.Time{}, fmt.Errorf("ledger: first seen of %s: %w", job, err)
	}
	return got.UTC(), nil
}
