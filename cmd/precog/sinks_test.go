package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

const recsSpec = `name: user-recs
source:
  parquet: { path: "data/users/dt={{.date}}" }
  key: user_id
  rows_per_shard: 1500
model:
  path: models/recs.onnx
  inputs:
    features: { columns: [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] }
  outputs: { topk_items: items, topk_scores: scores }
  batch_size: 512
sinks:
  parquet:  { path: "out/recs/date={{.date}}" }
  postgres: { dsn: "${TEST_DATABASE_URL}", table: user_recs, mode: replace }
  redis:    { addr: "${TEST_REDIS_ADDR}", db: "${TEST_REDIS_DB}", namespace: "${TEST_NS}", ttl: 1h }
`

// TestRecsToAllSinks runs the recommendation refresh into Parquet, Postgres
// and Redis and reads one user's top-50 back from each store, checked
// against the pure-Go reference; then refreshes again and rolls back.
func TestRecsToAllSinks(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "recs"
	dir := workdir(t)
	spec := writeSpec(t, dir, "recs.yaml", recsSpec)
	env := sinkEnv(pg.DSN, rd, ns)

	r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	ctx := context.Background()
	rc := rd.Client(t)
	v1, err := rc.Get(ctx, ns+":current").Result()
	if err != nil {
		t.Fatalf("%s:current: %v", ns, err)
	}

	m, err := testgen.Get("recs")
	if err != nil {
		t.Fatal(err)
	}
	d := usersData.Defaults()
	first, _ := d.Keys(0, 1)
	for _, k := range []int64{0, 1, first + 17} {
		key := testgen.KeyString(k)
		ref, err := m.Reference(d.Row(k).Features, 1)
		if err != nil {
			t.Fatal(err)
		}
		wantItems := ref["topk_items"].Int64

		raw, err := rc.Get(ctx, ns+":"+v1+":"+key).Bytes()
		if err != nil {
			t.Fatalf("redis %s: %v", key, err)
		}
		var rec struct {
			Items        []int64   `json:"items"`
			Scores       []float32 `json:"scores"`
			ModelVersion string    `json:"model_version"`
			ComputedAt   string    `json:"computed_at"`
			Date         string    `json:"date"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatalf("redis record %s: %v: %s", key, err, raw)
		}
		if !slices.Equal(rec.Items, wantItems) || rec.ModelVersion == "" || rec.ComputedAt == "" || rec.Date != "2026-11-01" {
			t.Errorf("redis %s: got %+v, want items %v", key, rec, wantItems)
		}
		if ttl := rc.TTL(ctx, ns+":"+v1+":"+key).Val(); ttl <= 0 {
			t.Errorf("redis %s: no TTL (%v)", key, ttl)
		}

		conn, err := pgx.Connect(ctx, pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		var items []int64
		var scores []float32
		if err := conn.QueryRow(ctx, "SELECT items, scores FROM user_recs WHERE user_id = $1", key).Scan(&items, &scores); err != nil {
			t.Fatalf("postgres %s: %v", key, err)
		}
		conn.Close(ctx)
		if !slices.Equal(items, wantItems) || !slices.Equal(scores, rec.Scores) {
			t.Errorf("postgres %s: items %v scores %v; want %v / redis scores %v", key, items, scores, wantItems, rec.Scores)
		}
	}
	var n int
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM user_recs").Scan(&n); err != nil || n != 4000 {
		t.Fatalf("postgres rows: %d, %v", n, err)
	}

	// A second refresh publishes a new version; rollback returns to v1 in
	// Redis and Postgres at once.
	if r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("second run: %d %s", r.code, r.stderr)
	}
	v2 := rc.Get(ctx, ns+":current").Val()
	if v2 == v1 {
		t.Fatal("second run did not publish a new version")
	}
	rb := precogEnv(t, dir, env, "rollback", spec, "--param", "date=2026-11-01")
	if rb.code != 0 || !strings.Contains(rb.stdout, v1) {
		t.Fatalf("rollback: exit %d\n%s\n%s", rb.code, rb.stdout, rb.stderr)
	}
	if cur := rc.Get(ctx, ns+":current").Val(); cur != v1 {
		t.Errorf("redis current after rollback: %s, want %s", cur, v1)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM user_recs").Scan(&n); err != nil || n != 4000 {
		t.Fatalf("postgres rows after rollback: %d, %v", n, err)
	}
	if bad := precogEnv(t, dir, env, "rollback", spec, "--param", "date=2026-11-01", "--to", "nope"); bad.code == 0 ||
		!strings.Contains(bad.stderr, "not retained") {
		t.Errorf("rollback to unknown version: exit %d %s", bad.code, bad.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "recs", "date=2026-11-01", "_SUCCESS")); err != nil {
		t.Errorf("parquet not published: %v", err)
	}
}

func precogEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return precog(t, dir, args...)
}

// TestPostgresSourceToUpsert is an analyst's job: a SELECT over a features
// table, sharded by id, scored into a Postgres table in upsert mode; running
// it again replaces the date's rows instead of adding to them.
func TestPostgresSourceToUpsert(t *testing.T) {
	pg := testservers.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cols := make([]string, 16)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE features (user_id bigint PRIMARY KEY, "+strings.Join(cols, " real, ")+" real)"); err != nil {
		t.Fatal(err)
	}
	d := testgen.Dataset{Seed: 5}.Defaults()
	const n = 2500
	rows := make([][]any, 0, n)
	for k := int64(0); k < n; k++ {
		f := d.Row(k).Features
		row := []any{k}
		for _, v := range f {
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"features"}, append([]string{"user_id"}, cols...), pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}

	dir := workdir(t)
	spec := writeSpec(t, dir, "pg.yaml", `name: pg-scores
source:
  postgres:
    dsn: "${TEST_DATABASE_URL}"
    query: "SELECT * FROM features WHERE user_id % 5 <> 4 OR '{{.date}}' <> ''"
    shard_by: user_id
  key: user_id
  rows_per_shard: 1000
model:
  path: models/ranker.onnx
  inputs:
    features: { columns: [`+strings.Join(cols, ", ")+`] }
  outputs: { score: score }
sinks:
  postgres: { dsn: "${TEST_DATABASE_URL}", table: scores, mode: upsert }
`)
	env := []string{"TEST_DATABASE_URL=" + pg.DSN}
	for range 2 {
		if r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
			t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	}
	var count int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM scores WHERE date = '2026-11-01'").Scan(&count); err != nil || count != n {
		t.Fatalf("scores rows: %d (%v), want %d after two runs", count, err, n)
	}
	m, _ := testgen.Get("ranker")
	for _, k := range []int64{0, 999, 2499} {
		var got float32
		if err := conn.QueryRow(ctx, "SELECT score FROM scores WHERE user_id = $1", k).Scan(&got); err != nil {
			t.Fatal(err)
		}
		ref, _ := m.Reference(d.Row(k).Features, 1)
		if want := ref["score"].Float32[0]; got < want-1e-4 || got > want+1e-4 {
			t.Errorf("user %d: score %v, want %v", k, got, want)
		}
	}
}

// sinkEnv is the environment of the tests' all-sinks specs: the Postgres
// sink's DSN and the Redis server, database and namespace they expand.
func sinkEnv(dsn string, rd *testservers.RedisServer, ns string) []string {
	return []string{"TEST_DATABASE_URL=" + dsn, "TEST_REDIS_ADDR=" + rd.Addr, fmt.Sprintf("TEST_REDIS_DB=%d", rd.DB), "TEST_NS=" + ns}
}
