package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestCostColumnUpgrade: a database at the schema before shard costs, with
// a shard committed there, migrates on Open and its shards read with a zero
// cost; a shard committed after reads back its cost.
func TestCostColumnUpgrade(t *testing.T) {
	pg := testservers.Postgres(t)
	ctx := context.Background()
	before := 8 // step 9 added shard costs
	pg.Exec(t, `CREATE TABLE precog_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
	for v := 1; v <= before; v++ {
		pg.Exec(t, migrations[v-1])
		pg.Exec(t, `INSERT INTO precog_schema (version) VALUES ($1)`, v)
	}
	pg.Exec(t, `INSERT INTO precog_runs (id, job, version, params_key, pool, state, shards, created_at, updated_at)
		VALUES ('old', 'j', 'v1', '', 'default', 'running', 2, now(), now())`)
	pg.Exec(t, `INSERT INTO precog_run_shards (run_id, idx, state, rows_in, rows_out, updated_at)
		VALUES ('old', 0, 'committed', 5, 5, now()), ('old', 1, 'pending', 0, 0, now())`)

	l := open(t, pg.DSN)
	defer l.Close()
	shards, err := l.Shards(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 2 || shards[0].State != jobs.ShardCommitted || shards[0].Counts.RowsIn != 5 || !shards[0].Cost.IsZero() {
		t.Fatalf("shards of the old schema read as %+v", shards)
	}
	s, err := l.Claim(ctx, "old", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := jobs.Cost{CPUSeconds: 2, DeviceSeconds: 1, GPUSampledSeconds: 1, GPUBusySeconds: 0.5, GPURows: 7}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: "old", Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 7, RowsOut: 7}, Cost: c}); err != nil {
		t.Fatal(err)
	}
	shards, err = l.Shards(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if got := jobs.SumCost(shards); got != c {
		t.Fatalf("run cost %+v, want %+v", got, c)
	}
}
