package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/sinks"
)

// upsertKey is the upsert table's primary key: the run parameters (sorted),
// model_version when model_version_in_key, then the key column.
func (s *Sink) upsertKey(run sinks.RunInfo) []string {
	pk := paramCols(run)
	if s.spec.ModelVersionInKey {
		pk = append(pk, sinks.ColModelVersion)
	}
	return append(pk, run.Key)
}

// partition is the upsert table's rows a run replaces: those of its
// params and, with model_version_in_key, of the model versions it staged
// (so an empty run replaces nothing in that mode: it names no model).
func (s *Sink) partition(run sinks.RunInfo) (where string, args []any) {
	conds := []string{"true"}
	for _, p := range paramCols(run) {
		args = append(args, run.Params[p])
		conds = append(conds, fmt.Sprintf("%s = $%d", quote(p), len(args)))
	}
	if s.spec.ModelVersionInKey {
		mv := quote(sinks.ColModelVersion)
		conds = append(conds, mv+" IN (SELECT DISTINCT "+mv+" FROM "+s.ident(s.runTable(run.Version))+")")
	}
	return strings.Join(conds, " AND "), args
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = quote(n)
	}
	return out
}

// createUpsertTable creates the upsert target, or checks that the existing
// one (precog's, checked by the caller) has the primary key the spec needs.
func (s *Sink) createUpsertTable(ctx context.Context, tx pgx.Tx, run sinks.RunInfo, cols []column) error {
	pk := s.upsertKey(run)
	o, err := s.owned(ctx, tx, s.spec.Table)
	if err != nil {
		return err
	}
	if o.exists {
		var have []string
		if err := tx.QueryRow(ctx, `SELECT COALESCE(array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum)), '{}')
			FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
			WHERE i.indrelid = $1 AND i.indisprimary`, o.oid).Scan(&have); err != nil {
			return fmt.Errorf("primary key of %s: %w", s.spec.Table, err)
		}
		if !slices.Equal(have, pk) {
			return fmt.Errorf("table %s has primary key (%s), the spec needs (%s) (did model_version_in_key or the run parameters change? migrate or use a new table)",
				s.spec.Table, strings.Join(have, ", "), strings.Join(pk, ", "))
		}
		return nil
	}
	defs := make([]string, 0, len(cols)+2)
	for _, c := range cols {
		d := quote(c.name) + " " + c.sqlTyp
		if slices.Contains(pk, c.name) {
			d += " NOT NULL"
		}
		defs = append(defs, d)
	}
	defs = append(defs, quote(colVersion)+" text NOT NULL", "PRIMARY KEY ("+strings.Join(quoteAll(pk), ", ")+")")
	return s.createOwned(ctx, tx, s.spec.Table, kindTable, run.Version,
		"CREATE TABLE "+s.ident(s.spec.Table)+" ("+strings.Join(defs, ", ")+")")
}

// checkUpsertStage makes sure the publish's INSERT cannot fail: the target
// is precog's and has the staged columns with the same types, and no staged
// row has a NULL in the primary key or parameter values other than the
// run's (which the partition delete would miss).
func (s *Sink) checkUpsertStage(ctx context.Context, tx pgx.Tx, run sinks.RunInfo) error {
	rt := s.runTable(run.Version)
	o, err := s.owned(ctx, tx, s.spec.Table)
	if err != nil {
		return err
	}
	if !o.exists {
		return fmt.Errorf("table %s does not exist (dropped since Prepare?)", s.spec.Table)
	}
	staged, err := s.relColumns(ctx, tx, rt)
	if err != nil {
		return err
	}
	target, err := s.relColumns(ctx, tx, s.spec.Table)
	if err != nil {
		return err
	}
	if !slices.Equal(staged, target) {
		return fmt.Errorf("the run's columns %v differ from table %s's %v (upsert mode cannot change columns; migrate the table or use a new one)",
			staged, s.spec.Table, target)
	}
	var bad []string
	args := []any{}
	for _, c := range s.upsertKey(run) {
		bad = append(bad, quote(c)+" IS NULL")
	}
	for _, p := range paramCols(run) {
		args = append(args, run.Params[p])
		bad = append(bad, fmt.Sprintf("%s IS DISTINCT FROM $%d", quote(p), len(args)))
	}
	var n int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+s.ident(rt)+" WHERE "+strings.Join(bad, " OR "), args...).Scan(&n); err != nil {
		return fmt.Errorf("check staged rows of %s: %w", rt, err)
	}
	if n > 0 {
		return fmt.Errorf("%d staged rows of %s have a NULL key column or parameter values other than the run's %v", n, rt, run.Params)
	}
	return nil
}

// publishUpsert swaps the partition in one transaction: delete its rows
// from {table}, insert the staged ones, drop the staging table. Readers
// (READ COMMITTED) see the whole old partition or the whole new one.
func (s *Sink) publishUpsert(ctx context.Context, run sinks.RunInfo) error {
	rt := s.runTable(run.Version)
	var deleted, inserted int64
	err := s.ddl(ctx, "publish version "+run.Version, func(tx pgx.Tx) error {
		if published, err := s.published(ctx, tx, run.Version); err != nil || published {
			return err
		}
		if err := s.checkStaged(ctx, tx, run); err != nil {
			return err
		}
		if o, err := s.owned(ctx, tx, s.spec.Table); err != nil {
			return err
		} else if !o.exists {
			return fmt.Errorf("table %s does not exist", s.spec.Table)
		}
		where, args := s.partition(run)
		tag, err := tx.Exec(ctx, "DELETE FROM "+s.ident(s.spec.Table)+" WHERE "+where, args...)
		if err != nil {
			return fmt.Errorf("delete the partition's rows from %s: %w", s.spec.Table, err)
		}
		deleted = tag.RowsAffected()
		cols, err := s.relColumns(ctx, tx, rt)
		if err != nil {
			return err
		}
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = quote(c.Name)
		}
		list := strings.Join(names, ", ")
		tag, err = tx.Exec(ctx, "INSERT INTO "+s.ident(s.spec.Table)+" ("+list+", "+quote(colVersion)+") SELECT "+list+", $1 FROM "+s.ident(rt), run.Version)
		if err != nil {
			return fmt.Errorf("insert the staged rows of %s into %s: %w", rt, s.spec.Table, err)
		}
		inserted = tag.RowsAffected()
		if _, err := s.dropOwned(ctx, tx, rt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+s.ident(tabShards)+" WHERE run_table = $1", rt); err != nil {
			return err
		}
		return s.recordPublished(ctx, tx, run, s.spec.Table)
	})
	if err != nil {
		return err
	}
	s.log.Info("published", "version", run.Version, "rows_deleted", deleted, "rows_inserted", inserted)
	return nil
}
