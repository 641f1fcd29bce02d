package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// defaultLockTTL is the lease of a writer lock when the holder names none
// (sinks.Holder.Lease). A writer killed without Release blocks the target
// for at most this long.
const defaultLockTTL = sinks.DefaultLockLease

// lockTarget names what one writer may hold: the table in replace mode
// (all params share one view), the table and params in upsert mode.
func (s *Sink) lockTarget(run sinks.RunInfo) string {
	t := s.schema + "." + s.spec.Table
	if s.spec.Mode == jobs.PostgresUpsert && len(run.Params) > 0 {
		v := url.Values{}
		for k, p := range run.Params {
			v.Set(k, p)
		}
		t += "?" + v.Encode() // sorted by name
	}
	return t
}

// Lock takes the target's row in precog_locks: inserted, or taken over
// only when its lease expired (the holder died) or its holder is an earlier
// process of the same run (killed before it released; a run is resumed by
// one process at a time). A goroutine renews the
// lease every ttl/3; Lost closes when a renewal finds the row gone or
// another holder's, or cannot renew before the lease ends.
func (s *Sink) Lock(ctx context.Context, run sinks.RunInfo, holder sinks.Holder) (sinks.Lock, error) {
	target := s.lockTarget(run)
	if err := s.createLockTable(ctx); err != nil {
		return nil, err
	}
	h, err := json.Marshal(holder)
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	ttl := s.lockTTL
	if holder.Lease > 0 {
		ttl = holder.Lease
	}
	l := &pgLock{s: s, target: target, token: hex.EncodeToString(tok[:]), ttl: ttl}
	for range 3 { // the holder may release between our insert and our read
		start := time.Now()
		var got bool
		err := s.pool.QueryRow(ctx, `INSERT INTO `+s.ident(tabLocks)+` AS l (target, holder, token, expires_at)
			VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
			ON CONFLICT (target) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
			WHERE l.expires_at < now() OR l.holder->>'run_id' = $5 RETURNING true`, target, h, l.token, l.ttl.Microseconds(), run.RunID).Scan(&got)
		if err == nil {
			l.Lease = sinks.StartLease(start, sinks.LeaseParams{TTL: ttl, Renew: l.renew,
				OnLost: func(why string) {
					s.log.Error("writer lock lost; stop writing", "target", target, "reason", why)
				},
				OnRetry: func(err error) { s.log.Warn("writer lock renewal failed; retrying", "target", target, "err", err) }})
			s.endStaleHolders(ctx, target, l.token)
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, s.wrap("lock "+target, err)
		}
		var other sinks.Holder
		err = s.pool.QueryRow(ctx, "SELECT holder FROM "+s.ident(tabLocks)+" WHERE target = $1", target).Scan(&other)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, s.wrap("read the holder of "+target, err)
		}
		return nil, &sinks.LockedError{Sink: "postgres", Target: target, Holder: other}
	}
	return nil, s.wrap("lock "+target, errors.New("the lock row kept changing hands"))
}

// lockLabel is the application_name of the DDL sessions of the writer
// holding target's lock with token: "precog-lock-<target hash>-<token>".
func lockLabel(target, token string) string {
	sum := sha256.Sum256([]byte(target))
	return fmt.Sprintf("precog-lock-%x-%s", sum[:8], token[:16])
}

// endStaleHolders labels this sink's DDL sessions with the lock just taken
// and terminates those of earlier holders of target, in this database: a
// holder frozen inside a stage or publish transaction (its lease lapsed,
// or it is an earlier process of the run) would otherwise hold the
// table's advisory lock until the server's idle-in-transaction timeout.
// Their transactions roll back; every step they ran is redone by the new
// holder.
func (s *Sink) endStaleHolders(ctx context.Context, target, token string) {
	mine := lockLabel(target, token)
	s.mu.Lock()
	s.ddlLabel = mine
	s.mu.Unlock()
	prefix := strings.TrimSuffix(mine, token[:16])
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE starts_with(application_name, $1) AND application_name <> $2 AND datname = current_database() AND pid <> pg_backend_pid()`,
		prefix, mine).Scan(&n)
	if err != nil {
		s.log.Warn("could not end the sessions of the lock's earlier holder", "target", target, "err", err)
	} else if n > 0 {
		s.log.Info("ended the sessions of the lock's earlier holder", "target", target, "sessions", n)
	}
}

// createLockTable creates the schema and precog_locks when missing (Lock
// comes before Prepare).
func (s *Sink) createLockTable(ctx context.Context) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.ident(tabLocks)).Scan(&ok); err != nil {
		return s.wrap("find "+tabLocks, err)
	}
	if ok {
		return nil
	}
	return s.ddl(ctx, "create "+tabLocks, func(tx pgx.Tx) error {
		if err := s.createSchema(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.ident(tabLocks)+` (
			target     text PRIMARY KEY,
			holder     jsonb NOT NULL,
			token      text NOT NULL,
			expires_at timestamptz NOT NULL)`)
		return err
	})
}

// pgLock is a held row of precog_locks, identified by its random token,
// and its lease (Lost, renewed every ttl/3).
type pgLock struct {
	*sinks.Lease
	s      *Sink
	target string
	token  string
	ttl    time.Duration
}

// renew extends the row's lease once (sinks.LeaseParams.Renew); a row
// removed or another holder's is sinks.ErrLeaseGone.
func (l *pgLock) renew(ctx context.Context) error {
	tag, err := l.s.pool.Exec(ctx, "UPDATE "+l.s.ident(tabLocks)+" SET expires_at = now() + $3 * interval '1 microsecond' WHERE target = $1 AND token = $2",
		l.target, l.token, l.ttl.Microseconds())
	switch {
	case err != nil:
		return err
	case tag.RowsAffected() != 1:
		return fmt.Errorf("%w: the lock row was removed or taken over by another writer", sinks.ErrLeaseGone)
	}
	return nil
}

// Release stops renewing and deletes the row if it is still ours.
// Idempotent.
func (l *pgLock) Release(ctx context.Context) error {
	l.Stop()
	l.s.mu.Lock()
	if l.s.ddlLabel == lockLabel(l.target, l.token) {
		l.s.ddlLabel = ""
	}
	l.s.mu.Unlock()
	_, err := l.s.pool.Exec(ctx, "DELETE FROM "+l.s.ident(tabLocks)+" WHERE target = $1 AND token = $2", l.target, l.token)
	return l.s.wrap("release lock "+l.target, err)
}
