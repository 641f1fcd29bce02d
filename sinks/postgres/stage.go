package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Stage is phase one of the publish: in one transaction on the run table
// it deletes rows of shards the ledger did not commit (abandoned attempts),
// checks every committed shard holds its rows (*sinks.MissingError), builds
// the unique key index (*sinks.DuplicateKeyError names the key and both
// shards), ANALYZEs, and in upsert mode checks the rows fit the target
// table. Nothing becomes visible. Idempotent; a no-op for a published run.
func (s *Sink) Stage(ctx context.Context, run sinks.RunInfo, committed []sinks.CommittedShard) error {
	rt := s.runTable(run.Version)
	return s.ddl(ctx, "stage run "+run.Version, func(tx pgx.Tx) error {
		if published, err := s.published(ctx, tx, run.Version); err != nil || published {
			return err
		}
		o, err := s.owned(ctx, tx, rt)
		if err != nil {
			return err
		}
		if !o.exists {
			return fmt.Errorf("run table %s of version %s does not exist (run not prepared, or aborted)", rt, run.Version)
		}
		if err := s.verifyShards(ctx, tx, rt, committed); err != nil {
			return err
		}
		if err := s.buildKeyIndex(ctx, tx, run); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "ANALYZE "+s.ident(rt)); err != nil {
			return fmt.Errorf("analyze %s: %w", rt, err)
		}
		if s.spec.Mode == jobs.PostgresUpsert {
			return s.checkUpsertStage(ctx, tx, run)
		}
		return nil
	})
}

// verifyShards deletes rows of shards not in committed and compares the
// row count of every committed shard with the ledger's.
func (s *Sink) verifyShards(ctx context.Context, tx pgx.Tx, rt string, committed []sinks.CommittedShard) error {
	idx := make([]int32, len(committed))
	for i, c := range committed {
		idx[i] = int32(c.Index)
	}
	tag, err := tx.Exec(ctx, "DELETE FROM "+s.ident(rt)+" WHERE NOT ("+quote(colShard)+" = ANY($1))", idx)
	if err != nil {
		return fmt.Errorf("delete rows of uncommitted shards from %s: %w", rt, err)
	}
	if n := tag.RowsAffected(); n > 0 {
		s.log.Info("deleted rows of abandoned shard attempts", "run_table", rt, "rows", n)
		if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident(tabShards)+" WHERE run_table = $1 AND NOT (shard = ANY($2))", rt, idx); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, "SELECT "+quote(colShard)+", count(*) FROM "+s.ident(rt)+" GROUP BY 1")
	if err != nil {
		return fmt.Errorf("count rows per shard of %s: %w", rt, err)
	}
	have := map[int32]int64{}
	var shard int32
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&shard, &n}, func() error { have[shard] = n; return nil }); err != nil {
		return fmt.Errorf("count rows per shard of %s: %w", rt, err)
	}
	var missing []int
	var reasons []string
	for _, c := range committed {
		if got := have[int32(c.Index)]; got != c.Rows {
			missing = append(missing, c.Index)
			if len(reasons) < 5 {
				reasons = append(reasons, fmt.Sprintf("shard %d has %d of %d rows", c.Index, got, c.Rows))
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	reason := "run table " + rt + ": " + strings.Join(reasons, ", ")
	if len(missing) > len(reasons) {
		reason += fmt.Sprintf(", … %d more", len(missing)-len(reasons))
	}
	return &sinks.MissingError{Sink: "postgres", Shards: missing, Reason: reason}
}

// keyIndex names the unique key index of run's table; its presence marks
// the run as staged.
func (s *Sink) keyIndex(run sinks.RunInfo) string {
	return shortName("precog_uidx", s.runTable(run.Version), run.Key)
}

// buildKeyIndex creates the unique index on the key. A unique violation is
// a key written twice in the run: the first such key and its shards come
// back as a *sinks.DuplicateKeyError.
func (s *Sink) buildKeyIndex(ctx context.Context, tx pgx.Tx, run sinks.RunInfo) error {
	rt := s.runTable(run.Version)
	sp, err := tx.Begin(ctx) // a savepoint, so the duplicate can be looked up after the failure
	if err != nil {
		return err
	}
	_, err = sp.Exec(ctx, "CREATE UNIQUE INDEX IF NOT EXISTS "+quote(s.keyIndex(run))+" ON "+s.ident(rt)+" ("+quote(run.Key)+")")
	if err == nil {
		return sp.Commit(ctx)
	}
	_ = sp.Rollback(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		return fmt.Errorf("create key index on %s: %w", rt, err)
	}
	var key string
	var shards []int32
	if err := tx.QueryRow(ctx, "SELECT "+quote(run.Key)+"::text, (array_agg("+quote(colShard)+" ORDER BY "+quote(colShard)+"))[1:2] FROM "+
		s.ident(rt)+" GROUP BY 1 HAVING count(*) > 1 LIMIT 1").Scan(&key, &shards); err != nil {
		return fmt.Errorf("create key index on %s: %w (and finding the duplicate failed: %v)", rt, pe, err)
	}
	return &sinks.DuplicateKeyError{Sink: "postgres", Key: key,
		First: fmt.Sprintf("shard %d", shards[0]), Second: fmt.Sprintf("shard %d", shards[1])}
}
