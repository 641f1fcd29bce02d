package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
)

// TestCleanupDueUpgrade: a pending cleanup recorded at the schema before
// due times (step 11) is due at once after the upgrade, as it was before.
func TestCleanupDueUpgrade(t *testing.T) {
	pg := testservers.Postgres(t)
	ctx := context.Background()
	const before = 11 // step 12 added due times and claims
	pg.Exec(t, `CREATE TABLE precog_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
	for v := 1; v <= before; v++ {
		pg.Exec(t, migrations[v-1])
		pg.Exec(t, `INSERT INTO precog_schema (version) VALUES ($1)`, v)
	}
	pg.Exec(t, `INSERT INTO precog_runs (id, job, version, params_key, pool, state, shards, created_at, updated_at)
		VALUES ('old', 'j', 'v1', '', 'default', 'cancelled', 1, now(), now())`)
	pg.Exec(t, `INSERT INTO precog_cleanups (run_id, pool, reason) VALUES ('old', 'default', 'redis down')`)

	l := open(t, pg.DSN)
	defer l.Close()
	if due, err := l.CleanupsDue(ctx, "default", 10); err != nil || !slices.Equal(due, []string{"old"}) {
		t.Fatalf("CleanupsDue after the upgrade = %v, %v; want [old]", due, err)
	}
	c, err := l.PendingCleanup(ctx, "old")
	if err != nil || !c.DueAt.Equal(c.CreatedAt) || c.Reason != "redis down" {
		t.Fatalf("PendingCleanup(old) = %+v, %v; want due when recorded", c, err)
	}
}
