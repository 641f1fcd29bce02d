package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// claimPrivileges are the table privileges a worker's claims, heartbeats,
// completions and publishes use (FOR UPDATE needs UPDATE too).
var claimPrivileges = [][2]string{
	{"precog_runs", "SELECT"}, {"precog_runs", "UPDATE"},
	{"precog_run_shards", "SELECT"}, {"precog_run_shards", "UPDATE"},
}

// ErrCannotClaim: the ledger answers, but this session could not claim a
// shard (a role without the privileges, a read-only session or replica).
var ErrCannotClaim = errors.New("the ledger session cannot claim shards")

// CheckClaim reports whether this ledger's sessions may claim shards,
// without claiming or locking anything: the role's privileges on the
// tables claims write, and whether the session is read-only (a replica,
// default_transaction_read_only). A worker's readiness is this check: a
// worker whose every claim would fail is not ready. The error says why.
func (l *Ledger) CheckClaim(ctx context.Context) error {
	tables := make([]string, len(claimPrivileges))
	privs := make([]string, len(claimPrivileges))
	for i, p := range claimPrivileges {
		tables[i], privs[i] = p[0], p[1]
	}
	var (
		user           string
		recovery, roTx bool
		missing        []string
	)
	err := l.pool.QueryRow(ctx, `SELECT current_user, pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
		coalesce((SELECT array_agg(x.p || ' on ' || x.t ORDER BY x.ord)
			FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(t, p, ord)
			WHERE CASE WHEN to_regclass(x.t) IS NULL THEN true ELSE NOT has_table_privilege(x.t, x.p) END), '{}')`,
		tables, privs).Scan(&user, &recovery, &roTx, &missing)
	if err != nil {
		return fmt.Errorf("ledger: check claim privileges: %w", err)
	}
	switch {
	case recovery:
		return fmt.Errorf("ledger: %w: the database is a read-only replica (in recovery)", ErrCannotClaim)
	case roTx:
		return fmt.Errorf("ledger: %w: role %s's sessions are read-only (default_transaction_read_only)", ErrCannotClaim, user)
	case len(missing) > 0:
		return fmt.Errorf("ledger: %w: role %s lacks %s (grant them to the worker's role)", ErrCannotClaim, user, strings.Join(missing, ", "))
	}
	return nil
}
