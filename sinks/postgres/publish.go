package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Publish is phase two: it makes the staged run current in one
// transaction. Replace: re-points the view and drops run tables beyond
// Retain; upsert: swaps the partition's rows (upsert.go). A version
// published before (even if since rolled back) is left alone, so a retried
// Publish never undoes a later one.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	if s.spec.Mode == jobs.PostgresUpsert {
		return s.publishUpsert(ctx, run)
	}
	rt := s.runTable(run.Version)
	var dropped []string
	err := s.ddl(ctx, "publish version "+run.Version, func(tx pgx.Tx) error {
		dropped = nil
		if published, err := s.published(ctx, tx, run.Version); err != nil || published {
			return err
		}
		if err := s.checkOrder(ctx, tx, run.Version); err != nil {
			return err
		}
		if err := s.checkStaged(ctx, tx, run); err != nil {
			return err
		}
		if err := s.pointView(ctx, tx, rt); err != nil {
			return err
		}
		if err := s.recordPublished(ctx, tx, run, rt); err != nil {
			return err
		}
		var err error
		dropped, err = s.retain(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DELETE FROM "+s.ident(tabShards)+" WHERE run_table = $1", rt)
		return err
	})
	if err != nil {
		return err
	}
	s.log.Info("published", "version", run.Version, "run_table", rt, "dropped_versions", dropped)
	return nil
}

// checkOrder applies sinks.CheckPublishOrder against the newest version
// this table published (under the ddl lock, so atomic with the cutover):
// jobs.LatestVersion of the versions listed (retention keeps few).
func (s *Sink) checkOrder(ctx context.Context, tx pgx.Tx, version string) error {
	rows, err := tx.Query(ctx, "SELECT version FROM "+s.ident(tabVersions)+" WHERE table_name = $1", s.spec.Table)
	if err != nil {
		return err
	}
	listed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	return sinks.CheckPublishOrder("postgres "+s.spec.Table, version, jobs.LatestVersion(listed...))
}

// published reports whether version was published before.
func (s *Sink) published(ctx context.Context, tx pgx.Tx, version string) (bool, error) {
	var published bool
	err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.ident(tabVersions)+" WHERE table_name = $1 AND version = $2)",
		s.spec.Table, version).Scan(&published)
	return published, err
}

// checkStaged fails unless Stage completed for run: its run table is
// precog's and carries the unique key index Stage builds last.
func (s *Sink) checkStaged(ctx context.Context, tx pgx.Tx, run sinks.RunInfo) error {
	rt := s.runTable(run.Version)
	o, err := s.owned(ctx, tx, rt)
	if err != nil {
		return err
	}
	if !o.exists {
		return fmt.Errorf("run table %s of version %s does not exist (run not prepared, aborted, or dropped by retention)", rt, run.Version)
	}
	var staged bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.ident(s.keyIndex(run))).Scan(&staged); err != nil {
		return err
	}
	if !staged {
		return fmt.Errorf("version %s is not staged: Stage must succeed before Publish", run.Version)
	}
	return nil
}

// recordPublished makes version the current one in precog_versions.
func (s *Sink) recordPublished(ctx context.Context, tx pgx.Tx, run sinks.RunInfo, runTable string) error {
	if _, err := tx.Exec(ctx, "UPDATE "+s.ident(tabVersions)+" SET is_current = false WHERE table_name = $1 AND is_current", s.spec.Table); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+s.ident(tabVersions)+
		" (table_name, version, job, run_id, run_table, mode, is_current) VALUES ($1, $2, $3, $4, $5, $6, true)",
		s.spec.Table, run.Version, s.job, run.RunID, runTable, string(s.spec.Mode))
	return err
}

// retain drops the run tables of published versions beyond Retain (the
// current one always stays) and returns their versions. A table by that
// name that is not precog's (dropped and recreated by someone) is left
// alone; only its version's bookkeeping goes.
func (s *Sink) retain(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, "SELECT version, run_table FROM "+s.ident(tabVersions)+
		" WHERE table_name = $1 AND NOT is_current ORDER BY published_at DESC, version DESC OFFSET $2", s.spec.Table, s.spec.Retain-1)
	if err != nil {
		return nil, err
	}
	old, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Version, RunTable string }])
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, o := range old {
		if _, err := s.dropOwned(ctx, tx, o.RunTable); err != nil {
			return nil, fmt.Errorf("retention: %w", err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident(tabVersions)+" WHERE table_name = $1 AND version = $2", s.spec.Table, o.Version); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident(tabShards)+" WHERE run_table = $1", o.RunTable); err != nil {
			return nil, err
		}
		dropped = append(dropped, o.Version)
	}
	return dropped, nil
}

// Abort drops the run table (replace) or staging table (upsert) of an
// unpublished run; a table by that name that is not precog's is left
// alone. Aborting a published replace version is an error: it is what
// readers see.
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	s.mu.Lock()
	var ws []*shardWriter
	for _, w := range s.active {
		if w.version == run.Version {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		_ = w.Abort(ctx)
	}
	rt := s.runTable(run.Version)
	return s.ddl(ctx, "abort run "+run.Version, func(tx pgx.Tx) error {
		var prepared bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.ident(tabVersions)).Scan(&prepared); err != nil || !prepared {
			return err // never prepared: nothing to drop
		}
		if s.spec.Mode == jobs.PostgresReplace {
			if published, err := s.published(ctx, tx, run.Version); err != nil {
				return err
			} else if published {
				return fmt.Errorf("version %s is published; roll back instead of aborting", run.Version)
			}
		}
		if _, err := s.dropOwned(ctx, tx, rt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+s.ident(tabShards)+" WHERE run_table = $1", rt)
		return err
	})
}

// Versions lists the retained published versions, newest first.
func (s *Sink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	rows, err := s.pool.Query(ctx, "SELECT version FROM "+s.ident(tabVersions)+
		" WHERE table_name = $1 ORDER BY published_at DESC, version DESC", s.spec.Table)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table: nothing published yet
			return nil, nil
		}
		return nil, s.wrap("list versions", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return vs, s.wrap("list versions", err)
}

// Current returns the version the view shows now ("" when none).
func (s *Sink) Current(ctx context.Context, run sinks.RunInfo) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT version FROM "+s.ident(tabVersions)+" WHERE table_name = $1 AND is_current",
		s.spec.Table).Scan(&v)
	var pe *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || (errors.As(err, &pe) && pe.Code == "42P01") {
		return "", nil // nothing published yet
	}
	return v, s.wrap("current version", err)
}

// Rollback points the view back at a retained version's run table in one
// transaction. Upsert mode keeps no earlier versions.
func (s *Sink) Rollback(ctx context.Context, run sinks.RunInfo, version string) error {
	if s.spec.Mode == jobs.PostgresUpsert {
		return fmt.Errorf("postgres sink %s.%s: upsert mode keeps no earlier versions to roll back to", s.schema, s.spec.Table)
	}
	return s.ddl(ctx, "roll back to "+version, func(tx pgx.Tx) error {
		var rt string
		err := tx.QueryRow(ctx, "SELECT run_table FROM "+s.ident(tabVersions)+" WHERE table_name = $1 AND version = $2",
			s.spec.Table, version).Scan(&rt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("version %q is not a retained published version", version)
		}
		if err != nil {
			return err
		}
		if _, err := s.owned(ctx, tx, rt); err != nil {
			return err
		}
		if err := s.pointView(ctx, tx, rt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE "+s.ident(tabVersions)+" SET is_current = (version = $2) WHERE table_name = $1", s.spec.Table, version); err != nil {
			return err
		}
		s.log.Info("rolled back", "version", version, "run_table", rt)
		return nil
	})
}
