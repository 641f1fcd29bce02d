package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

var (
	_ ledger.Workers = (*Ledger)(nil)
	_ ledger.Rejects = (*Ledger)(nil)
)

// HeartbeatWorker implements ledger.Workers: an upsert stamped with the
// database's clock. It also forgets workers lost for ledger.WorkerForget.
func (l *Ledger) HeartbeatWorker(ctx context.Context, w ledger.WorkerInfo) error {
	cur, err := json.Marshal(w.Current)
	if err != nil {
		return fmt.Errorf("ledger: heartbeat of worker %s: %w", w.ID, err)
	}
	var unable []byte // NULL when the worker can execute every run it met
	if len(w.Unable) > 0 {
		if unable, err = json.Marshal(w.Unable); err != nil {
			return fmt.Errorf("ledger: heartbeat of worker %s: %w", w.ID, err)
		}
	}
	devices := w.Devices
	if devices == nil {
		devices = []string{}
	}
	_, err = l.pool.Exec(ctx, `WITH gone AS (
			DELETE FROM precog_workers WHERE heartbeat_at < now() - $8::bigint * interval '1 microsecond' AND id <> $1)
		INSERT INTO precog_workers (id, pool, devices, version, model_cache, lease_us, current, unable, started_at, heartbeat_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $9::jsonb, now(), now())
		ON CONFLICT (id) DO UPDATE SET pool = EXCLUDED.pool, devices = EXCLUDED.devices, version = EXCLUDED.version,
			model_cache = EXCLUDED.model_cache, lease_us = EXCLUDED.lease_us, current = EXCLUDED.current, unable = EXCLUDED.unable, heartbeat_at = now()`,
		w.ID, poolOrDefault(w.Pool), devices, w.Version, w.ModelCache, micros(w.Lease), cur, micros(ledger.WorkerForget), unable)
	if err != nil {
		return fmt.Errorf("ledger: heartbeat of worker %s: %w", w.ID, err)
	}
	return nil
}

func poolOrDefault(p string) string {
	return jobs.PoolOrDefault(p)
}

// RemoveWorker implements ledger.Workers.
func (l *Ledger) RemoveWorker(ctx context.Context, id string) error {
	if _, err := l.pool.Exec(ctx, `DELETE FROM precog_workers WHERE id = $1`, id); err != nil {
		return fmt.Errorf("ledger: remove worker %s: %w", id, err)
	}
	return nil
}

// ListWorkers implements ledger.Workers; ages and lost are by the
// database's clock.
func (l *Ledger) ListWorkers(ctx context.Context, pool string) ([]ledger.WorkerInfo, error) {
	rows, err := l.pool.Query(ctx, `SELECT id, pool, devices, version, model_cache, lease_us, current, unable, started_at, heartbeat_at,
			extract(epoch FROM now() - heartbeat_at) * 1e6
		FROM precog_workers WHERE $1 = '' OR pool = $1 ORDER BY pool, id`, pool)
	if err != nil {
		return nil, fmt.Errorf("ledger: list workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.WorkerInfo, error) {
		var w ledger.WorkerInfo
		var leaseUS int64
		var ageUS float64
		var cur, unable []byte
		if err := row.Scan(&w.ID, &w.Pool, &w.Devices, &w.Version, &w.ModelCache, &leaseUS, &cur, &unable, &w.StartedAt, &w.HeartbeatAt, &ageUS); err != nil {
			return w, err
		}
		if len(cur) > 0 {
			if err := json.Unmarshal(cur, &w.Current); err != nil {
				return w, fmt.Errorf("worker %s: current shards: %w", w.ID, err)
			}
		}
		if len(unable) > 0 {
			if err := json.Unmarshal(unable, &w.Unable); err != nil {
				return w, fmt.Errorf("worker %s: runs it cannot execute: %w", w.ID, err)
			}
		}
		w.Lease = time.Duration(leaseUS) * time.Microsecond
		w.HeartbeatAge = time.Duration(ageUS) * time.Microsecond
		w.Lost = w.HeartbeatAge > w.Lease
		w.StartedAt, w.HeartbeatAt = w.StartedAt.UTC(), w.HeartbeatAt.UTC()
		return w, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list workers: %w", err)
	}
	return out, nil
}

// Rejects implements ledger.Rejects: rows of committed shards only, so a
// reopened shard's rejects are hidden until its next commit replaces them.
func (l *Ledger) Rejects(ctx context.Context, runID string, offset, limit int) (ledger.RejectPage, error) {
	page := ledger.RejectPage{Cap: l.opts.RejectsPerRun}
	var lim *int // NULL: LIMIT ALL
	if limit > 0 {
		lim = &limit
	}
	var exists bool
	err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM precog_runs WHERE id = $1),
		(SELECT count(*) FROM precog_rejects j JOIN precog_run_shards s ON s.run_id = j.run_id AND s.idx = j.shard
		 WHERE j.run_id = $1 AND s.state = 'committed')`, runID).Scan(&exists, &page.Stored)
	if err != nil {
		return page, fmt.Errorf("ledger: rejects of run %s: %w", runID, err)
	}
	if !exists {
		return page, fmt.Errorf("ledger: rejects: run %s: %w", runID, ledger.ErrNotFound)
	}
	rows, err := l.pool.Query(ctx, `SELECT j.shard, j.key, j.position, j.reason FROM precog_rejects j
		JOIN precog_run_shards s ON s.run_id = j.run_id AND s.idx = j.shard
		WHERE j.run_id = $1 AND s.state = 'committed' ORDER BY j.shard, j.n OFFSET $2 LIMIT $3`, runID, max(offset, 0), lim)
	if err != nil {
		return page, fmt.Errorf("ledger: rejects of run %s: %w", runID, err)
	}
	page.Rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobs.Reject, error) {
		var r jobs.Reject
		return r, row.Scan(&r.Shard, &r.Key, &r.Position, &r.Reason)
	})
	if err != nil {
		return page, fmt.Errorf("ledger: rejects of run %s: %w", runID, err)
	}
	return page, nil
}
