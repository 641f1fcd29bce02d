package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

var _ ledger.Backfills = (*Ledger)(nil)

// CreateBackfill implements ledger.Backfills: the backfill, its child runs
// and their shards in one transaction, then the first Parallel runs admitted.
func (l *Ledger) CreateBackfill(ctx context.Context, b ledger.Backfill, runs []ledger.BackfillRun) error {
	if b.ID == "" || b.Parallel < 1 {
		return fmt.Errorf("ledger: create backfill %q: need an id and parallel >= 1 (got %d)", b.ID, b.Parallel)
	}
	now := time.Now().UTC()
	if b.CreatedAt.IsZero() {
		b.CreatedAt = now
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO precog_backfills (id, job, param, from_value, to_value, step, params_key,
			parallel, priority, pool, cancelled, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now())`,
			b.ID, b.Job, b.Param, b.From, b.To, b.Step, b.ParamsKey, b.Parallel, b.Priority, poolName(b.Pool), b.Cancelled, b.CreatedAt); err != nil {
			return err
		}
		return addBackfillRunsTx(ctx, tx, b.ID, runs, 0)
	})
	return l.backfillError(ctx, "create backfill "+b.ID, runs, err)
}

// AddBackfillRuns implements ledger.Backfills.
func (l *Ledger) AddBackfillRuns(ctx context.Context, id string, runs []ledger.BackfillRun) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var base int
		err := tx.QueryRow(ctx, `SELECT coalesce((SELECT max(pos) + 1 FROM precog_backfill_runs WHERE backfill_id = $1), 0)
			FROM precog_backfills WHERE id = $1 FOR UPDATE`, id).Scan(&base)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		// A value already in the backfill keeps its position.
		return addBackfillRunsTx(ctx, tx, id, runs, base)
	})
	return l.backfillError(ctx, "add runs to backfill "+id, runs, err)
}

// addBackfillRunsTx creates (or attaches) runs and maps them to backfill
// id, then admits what the bound allows. A value new to the backfill gets
// position base, base+1…; a known one keeps its own.
func addBackfillRunsTx(ctx context.Context, tx pgx.Tx, id string, runs []ledger.BackfillRun, base int) error {
	for i, br := range runs {
		if !br.Attach {
			r := br.Run
			r.Pool = poolOf(r)
			if err := createRunTx(ctx, tx, r, br.Shards); err != nil {
				return err
			}
		}
		// An attached run already computed the value: admitted, so that
		// it never counts as waiting.
		if _, err := tx.Exec(ctx, `INSERT INTO precog_backfill_runs (backfill_id, pos, value, run_id, admitted)
			VALUES ($1, coalesce((SELECT min(pos) FROM precog_backfill_runs WHERE backfill_id = $1 AND value = $2), $3), $2, $4, $5)`,
			id, br.Value, base+i, br.Run.ID, br.Attach); err != nil {
			return fmt.Errorf("value %s: %w", br.Value, err)
		}
	}
	_, err := tx.Exec(ctx, `SELECT precog_backfill_admit($1)`, id)
	return err
}

// backfillError names the child run whose (job, params) is open already.
func (l *Ledger) backfillError(ctx context.Context, op string, runs []ledger.BackfillRun, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "precog_runs_open_key" {
		for _, br := range runs {
			if br.Attach {
				continue
			}
			if open, oerr := l.OpenRun(ctx, br.Run.Job, br.Run.ParamsKey); oerr == nil {
				return fmt.Errorf("ledger: %s: %w", op, &ledger.OpenRunError{Job: br.Run.Job, ParamsKey: br.Run.ParamsKey, RunID: open.ID, State: open.State})
			}
		}
		return fmt.Errorf("ledger: %s: a child run's params have another open run: %w", op, ledger.ErrRunOpen)
	}
	if err != nil {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	return nil
}

const backfillCols = `b.id, b.job, b.param, b.from_value, b.to_value, b.step, b.params_key, b.parallel, b.priority,
	b.pool, b.cancelled, b.created_at, b.updated_at`

func scanBackfill(row pgx.Row) (ledger.Backfill, error) {
	var b ledger.Backfill
	err := row.Scan(&b.ID, &b.Job, &b.Param, &b.From, &b.To, &b.Step, &b.ParamsKey, &b.Parallel, &b.Priority,
		&b.Pool, &b.Cancelled, &b.CreatedAt, &b.UpdatedAt)
	b.CreatedAt, b.UpdatedAt = b.CreatedAt.UTC(), b.UpdatedAt.UTC()
	return b, err
}

// dates reads a backfill's values in position order, each with its runs
// oldest first.
func (l *Ledger) dates(ctx context.Context, id string) ([]ledger.BackfillDate, error) {
	rows, err := l.pool.Query(ctx, `SELECT value, run_id FROM precog_backfill_runs WHERE backfill_id = $1 ORDER BY pos, seq`, id)
	if err != nil {
		return nil, err
	}
	var out []ledger.BackfillDate
	var value, run string
	_, err = pgx.ForEachRow(rows, []any{&value, &run}, func() error {
		if n := len(out); n == 0 || out[n-1].Value != value {
			out = append(out, ledger.BackfillDate{Value: value})
		}
		out[len(out)-1].Runs = append(out[len(out)-1].Runs, run)
		return nil
	})
	return out, err
}

// Backfill implements ledger.Backfills.
func (l *Ledger) Backfill(ctx context.Context, id string) (ledger.Backfill, error) {
	b, err := scanBackfill(l.pool.QueryRow(ctx, `SELECT `+backfillCols+` FROM precog_backfills b WHERE b.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("ledger: backfill %s: %w", id, ledger.ErrNotFound)
	}
	if err == nil {
		b.Dates, err = l.dates(ctx, id)
	}
	if err != nil {
		return b, fmt.Errorf("ledger: backfill %s: %w", id, err)
	}
	return b, nil
}

// Backfills implements ledger.Backfills.
func (l *Ledger) Backfills(ctx context.Context, job string, limit int) ([]ledger.Backfill, error) {
	q := `SELECT ` + backfillCols + ` FROM precog_backfills b WHERE ($1 = '' OR b.job = $1) ORDER BY b.created_at DESC, b.id DESC`
	args := []any{job}
	if limit > 0 {
		q += ` LIMIT $2`
		args = append(args, limit)
	}
	rows, err := l.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("ledger: backfills of %q: %w", job, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Backfill, error) { return scanBackfill(r) })
	if err != nil {
		return nil, fmt.Errorf("ledger: backfills of %q: %w", job, err)
	}
	for i := range out {
		if out[i].Dates, err = l.dates(ctx, out[i].ID); err != nil {
			return nil, fmt.Errorf("ledger: backfill %s: %w", out[i].ID, err)
		}
	}
	return out, nil
}

// BackfillOf implements ledger.Backfills.
func (l *Ledger) BackfillOf(ctx context.Context, runID string) (string, string, error) {
	var id, value string
	err := l.pool.QueryRow(ctx, `SELECT br.backfill_id, br.value FROM precog_backfill_runs br
		JOIN precog_backfills b ON b.id = br.backfill_id WHERE br.run_id = $1
		ORDER BY b.created_at DESC, b.id DESC LIMIT 1`, runID).Scan(&id, &value)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("ledger: backfill of run %s: %w", runID, ledger.ErrNotFound)
	}
	if err != nil {
		return "", "", fmt.Errorf("ledger: backfill of run %s: %w", runID, err)
	}
	return id, value, nil
}

// SetBackfill implements ledger.Backfills.
func (l *Ledger) SetBackfill(ctx context.Context, id string, parallel int, cancelled bool) error {
	if parallel < 1 {
		return fmt.Errorf("ledger: set backfill %s: parallel must be >= 1 (got %d)", id, parallel)
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE precog_backfills SET parallel = $2, cancelled = $3, updated_at = now() WHERE id = $1`, id, parallel, cancelled)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `SELECT precog_backfill_admit($1)`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: set backfill %s: %w", id, err)
	}
	return nil
}

// RetryBackfillRun implements ledger.Backfills: in one transaction the
// backfill's row is locked (as AddBackfillRuns and admission lock it), the
// run reopened as RetryRun does, its mapping marked waiting and the
// backfill's admission run, so a reopened run is claimable only once the
// bound admits it (the admission trigger fires on terminal states only:
// failed to running would pass it by).
func (l *Ledger) RetryBackfillRun(ctx context.Context, id, runID string) (int, error) {
	var re reopened
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var current bool
		err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM precog_backfill_runs o
				WHERE o.backfill_id = br.backfill_id AND o.value = br.value AND o.seq > br.seq)
			FROM precog_backfills b JOIN precog_backfill_runs br ON br.backfill_id = b.id
			WHERE b.id = $1 AND br.run_id = $2 FOR UPDATE OF b`, id, runID).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !current {
			return fmt.Errorf("not the current run of a value of the backfill: %w", ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if re, err = retryRunTx(ctx, tx, runID); err != nil {
			return err
		}
		if re.open {
			return fmt.Errorf("run %s is open, not failed: %w", runID, ledger.ErrRunOpen)
		}
		if _, err := tx.Exec(ctx, `UPDATE precog_backfill_runs SET admitted = false WHERE backfill_id = $1 AND run_id = $2`, id, runID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT precog_backfill_admit($1)`, id)
		return err
	})
	if err := l.retryRunError(ctx, "retry run "+runID+" of backfill "+id, re, err); err != nil {
		return 0, err
	}
	return re.moved, nil
}

// poolName is the pool recorded for a backfill ("" reads as the default).
func poolName(p string) string {
	return jobs.PoolOrDefault(p)
}
