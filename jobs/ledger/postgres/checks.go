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

var _ ledger.Checks = (*Ledger)(nil)

// PutShardProfile implements ledger.Checks.
func (l *Ledger) PutShardProfile(ctx context.Context, runID string, shard int, profile string) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO precog_shard_profiles (run_id, idx, profile) VALUES ($1, $2, $3)
		ON CONFLICT (run_id, idx) DO UPDATE SET profile = EXCLUDED.profile`, runID, shard, profile)
	if err != nil {
		return fmt.Errorf("ledger: store profile of shard %d of run %s: %w", shard, runID, err)
	}
	return nil
}

// ShardProfiles implements ledger.Checks.
func (l *Ledger) ShardProfiles(ctx context.Context, runID string) (map[int]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT idx, profile FROM precog_shard_profiles WHERE run_id = $1`, runID)
	if err != nil {
		return nil, fmt.Errorf("ledger: profiles of run %s: %w", runID, err)
	}
	out := map[int]string{}
	var idx int
	var p string
	_, err = pgx.ForEachRow(rows, []any{&idx, &p}, func() error { out[idx] = p; return nil })
	if err != nil {
		return nil, fmt.Errorf("ledger: profiles of run %s: %w", runID, err)
	}
	return out, nil
}

// PutCheckReport implements ledger.Checks.
func (l *Ledger) PutCheckReport(ctx context.Context, runID string, report []byte) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO precog_check_reports (run_id, report) VALUES ($1, $2::jsonb)
		ON CONFLICT (run_id) DO UPDATE SET report = EXCLUDED.report`, runID, string(report))
	if err != nil {
		return fmt.Errorf("ledger: store check report of run %s: %w", runID, err)
	}
	return nil
}

// CheckReport implements ledger.Checks.
func (l *Ledger) CheckReport(ctx context.Context, runID string) ([]byte, error) {
	var rep string
	err := l.pool.QueryRow(ctx, `SELECT report::text FROM precog_check_reports WHERE run_id = $1`, runID).Scan(&rep)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ledger.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: check report of run %s: %w", runID, err)
	}
	return []byte(rep), nil
}

// Hold implements ledger.Checks.
func (l *Ledger) Hold(ctx context.Context, runID, msg string) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, _, err := lockOpenRun(ctx, tx, runID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE precog_runs SET state = 'held', error = $2, updated_at = now(),
			publisher = NULL, publish_until = NULL WHERE id = $1`, runID, msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: hold run %s: %w", runID, err)
	}
	return nil
}

// ResolveHold implements ledger.Checks.
func (l *Ledger) ResolveHold(ctx context.Context, p ledger.ResolveHoldParams) error {
	runID, state, by, reason := p.RunID, p.State, p.By, p.Reason
	if err := p.Validate(); err != nil {
		return err
	}
	msg := ""
	if state == jobs.RunCancelled {
		msg = "discarded after its checks held it: " + reason
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var st string
		err := tx.QueryRow(ctx, `SELECT state FROM precog_runs WHERE id = $1 FOR UPDATE`, runID).Scan(&st)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if s := jobs.RunState(st); s != jobs.RunHeld {
			if !s.Terminal() {
				return fmt.Errorf("run %s is %s, not held: %w", runID, s, ledger.ErrRunOpen)
			}
			return fmt.Errorf("run %s is %s, not held: %w", runID, s, ledger.ErrRunFinished)
		}
		if _, err := tx.Exec(ctx, `UPDATE precog_runs SET state = $2, error = $3, updated_at = now() WHERE id = $1`,
			runID, string(state), msg); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO precog_check_reports (run_id, report, resolved_by, reason, resolved_at)
			VALUES ($1, '{}'::jsonb, $2, $3, now())
			ON CONFLICT (run_id) DO UPDATE SET resolved_by = $2, reason = $3, resolved_at = now()`, runID, by, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: resolve held run %s: %w", runID, err)
	}
	return nil
}

// Acceptance implements ledger.Checks.
func (l *Ledger) Acceptance(ctx context.Context, runID string) (ledger.Acceptance, error) {
	var a ledger.Acceptance
	var by, reason *string
	var at *time.Time
	err := l.pool.QueryRow(ctx, `SELECT resolved_by, reason, resolved_at FROM precog_check_reports WHERE run_id = $1`, runID).Scan(&by, &reason, &at)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && by == nil {
		err = ledger.ErrNotFound
	}
	if err != nil {
		return a, fmt.Errorf("ledger: acceptance of run %s: %w", runID, err)
	}
	a.By, a.Reason = *by, deref(reason)
	if at != nil {
		a.At = *at
	}
	return a, nil
}

// PutBaseline implements ledger.Checks.
func (l *Ledger) PutBaseline(ctx context.Context, b ledger.Baseline) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO precog_baselines (job, target, run_id, version, rows_out, profile, published_at)
		VALUES ($1, $2, $3, $4, $5, $6, now())
		ON CONFLICT (job, target) DO UPDATE SET run_id = $3, version = $4, rows_out = $5, profile = $6, published_at = now()`,
		b.Job, b.Target, b.RunID, b.Version, b.RowsOut, b.Profile)
	if err != nil {
		return fmt.Errorf("ledger: store baseline of %s: %w", b.Job, err)
	}
	return nil
}

// Baseline implements ledger.Checks.
func (l *Ledger) Baseline(ctx context.Context, job, target string) (ledger.Baseline, error) {
	b := ledger.Baseline{Job: job, Target: target}
	err := l.pool.QueryRow(ctx, `SELECT run_id, version, rows_out, profile, published_at FROM precog_baselines
		WHERE job = $1 AND target = $2`, job, target).Scan(&b.RunID, &b.Version, &b.RowsOut, &b.Profile, &b.PublishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ledger.ErrNotFound
	}
	if err != nil {
		return b, fmt.Errorf("ledger: baseline of %s: %w", job, err)
	}
	return b, nil
}
