package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

const zipMapSpec = `name: churn-classes
source:
  parquet: { path: "data/users/dt={{.date}}" }
  key: user_id
  rows_per_shard: 1500
model:
  path: zmodels/classifier_zipmap.onnx
  inputs:
    features: { columns: [f0, f1, f2, f3] }
  outputs: { label: label, output_probability: proba }
  batch_size: 256
sinks:
  parquet:  { path: "out/classes/date={{.date}}" }
  postgres: { dsn: "${TEST_DATABASE_URL}", table: user_classes, mode: replace }
  redis:    { addr: "${TEST_REDIS_ADDR}", db: "${TEST_REDIS_DB}", namespace: "${TEST_NS}", ttl: 1h }
`

// TestZipMapToAllSinks runs an sklearn-shaped classifier whose default
// export ends in ZipMap into all three sinks, and reads each user's class
// probabilities back as a map: a JSON object in Redis, jsonb in Postgres, a
// Parquet MAP column; every value equals the pure-Go reference.
func TestZipMapToAllSinks(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "classes"
	dir := workdir(t)
	if _, err := testgen.Write(filepath.Join(dir, "zmodels"), "classifier_zipmap"); err != nil {
		t.Fatal(err)
	}
	spec := writeSpec(t, dir, "classes.yaml", zipMapSpec)
	env := sinkEnv(pg.DSN, rd, ns)
	if r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// The reference: every row of the date whose four features are usable.
	m, err := testgen.Get("classifier_zipmap")
	if err != nil {
		t.Fatal(err)
	}
	d := usersData.Defaults()
	want := map[string][2]float32{}
	for fi := range d.FilesPerDate {
		first, n := d.Keys(0, fi)
		for k := first; k < first+n; k++ {
			row := d.Row(k)
			if row.Bad != testgen.BadNone {
				continue
			}
			ref, err := m.Reference(row.Features[:4], 1)
			if err != nil {
				t.Fatal(err)
			}
			p := ref["probabilities"].Float32
			want[testgen.KeyString(k)] = [2]float32{p[0], p[1]}
		}
	}
	if len(want) < 3000 {
		t.Fatalf("only %d reference rows", len(want))
	}
	check := func(sink, key string, got map[string]float64) {
		t.Helper()
		w := want[key]
		if len(got) != 2 || math.Abs(got["0"]-float64(w[0])) > 1e-6 || math.Abs(got["1"]-float64(w[1])) > 1e-6 {
			t.Fatalf("%s %s: proba %v, want {0:%v 1:%v}", sink, key, got, w[0], w[1])
		}
	}

	ctx := context.Background()
	rc := rd.Client(t)
	v, err := rc.Get(ctx, ns+":current").Result()
	if err != nil {
		t.Fatalf("%s:current: %v", ns, err)
	}
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var typ string
	if err := conn.QueryRow(ctx, `SELECT pg_typeof(proba)::text FROM user_classes LIMIT 1`).Scan(&typ); err != nil || typ != "jsonb" {
		t.Fatalf("postgres proba column: %q, %v; want jsonb", typ, err)
	}
	checked := 0
	for key := range want {
		if checked == 50 {
			break
		}
		checked++
		raw, err := rc.Get(ctx, ns+":"+v+":"+key).Bytes()
		if err != nil {
			t.Fatalf("redis %s: %v", key, err)
		}
		var rec struct {
			Proba map[string]float64 `json:"proba"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatalf("redis %s: %v: %s", key, err, raw)
		}
		check("redis", key, rec.Proba)

		var pgProba map[string]float64
		var p1 float64
		if err := conn.QueryRow(ctx, `SELECT proba, (proba->>'1')::float8 FROM user_classes WHERE user_id = $1`, key).Scan(&pgProba, &p1); err != nil {
			t.Fatalf("postgres %s: %v", key, err)
		}
		check("postgres", key, pgProba)
		if p1 != pgProba["1"] {
			t.Fatalf("postgres %s: proba->>'1' = %v, map says %v", key, p1, pgProba["1"])
		}
	}

	// Parquet: a MAP column; every reference row is there exactly once.
	files, _ := filepath.Glob(filepath.Join(dir, "out/classes/date=2026-11-01/*.parquet"))
	if len(files) == 0 {
		t.Fatal("no parquet files")
	}
	seen := map[string]bool{}
	for _, f := range files {
		rdr, err := file.OpenParquetFile(f, false)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tr := array.NewTableReader(tbl, 1024)
		for tr.Next() {
			rec := tr.RecordBatch()
			keys := rec.Column(rec.Schema().FieldIndices("user_id")[0]).(*array.String)
			pm, ok := rec.Column(rec.Schema().FieldIndices("proba")[0]).(*array.Map)
			if !ok {
				t.Fatalf("parquet proba is %s, want a map", rec.Column(rec.Schema().FieldIndices("proba")[0]).DataType())
			}
			mk, mv := pm.Keys().(*array.Int64), pm.Items().(*array.Float32)
			for i := range int(rec.NumRows()) {
				key := keys.Value(i)
				if _, ok := want[key]; !ok {
					continue // a row bad only in features the model does not read
				}
				if seen[key] {
					t.Fatalf("parquet: key %s twice", key)
				}
				seen[key] = true
				lo, hi := pm.ValueOffsets(i)
				got := map[string]float64{}
				for j := lo; j < hi; j++ {
					got[fmt.Sprint(mk.Value(int(j)))] = float64(mv.Value(int(j)))
				}
				check("parquet", key, got)
			}
		}
		tr.Release()
		tbl.Release()
		rdr.Close()
	}
	if len(seen) != len(want) {
		t.Fatalf("parquet holds %d of the %d reference rows", len(seen), len(want))
	}
}
