package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

const stringsSpec = `name: device-scores
source:
  parquet: { path: "sdata" }
  key: id
  rows_per_shard: 700
model:
  path: smodels/string_input.onnx
  inputs:
    cat: { columns: [country, device] }
  outputs: { score: score, region: region }
  batch_size: 128
sinks:
  parquet:  { path: "out/devices" }
  postgres: { dsn: "${TEST_DATABASE_URL}", table: device_scores, mode: replace }
  redis:    { addr: "${TEST_REDIS_ADDR}", db: "${TEST_REDIS_DB}", namespace: "${TEST_NS}", ttl: 1h }
`

// TestStringInputsToAllSinks runs a categorical pipeline (a tensor(string)
// input fed from two string columns, a string output) into all three sinks;
// every row's score and region equal the pure-Go reference, and a null
// category is a reject, not a failure.
func TestStringInputsToAllSinks(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "devices"
	dir := workdir(t)
	sm := testgen.NewStringModel(testgen.DefaultSeed)
	if _, err := sm.Write(filepath.Join(dir, "smodels")); err != nil {
		t.Fatal(err)
	}
	// 2000 rows: known, unknown and Unicode categories; every 101st country null.
	countries := append(append([]string(nil), sm.Countries...), "xx", "", "日本")
	devices := append(append([]string(nil), sm.Devices...), "tv")
	const n = 2000
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "device", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	type ref struct {
		score  float32
		region string
	}
	want := map[string]ref{}
	for r := range n {
		key := fmt.Sprintf("d%05d", r)
		c, d := countries[r%len(countries)], devices[(r/3)%len(devices)]
		rb.Field(0).(*array.StringBuilder).Append(key)
		if r%101 == 50 {
			rb.Field(1).AppendNull()
		} else {
			rb.Field(1).(*array.StringBuilder).Append(c)
			s, g := sm.Reference(c, d)
			want[key] = ref{s, g}
		}
		rb.Field(2).(*array.StringBuilder).Append(d)
	}
	rec := rb.NewRecordBatch()
	rb.Release()
	if err := os.MkdirAll(filepath.Join(dir, "sdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sdata", "part-0.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	if err := pqarrow.WriteTable(tbl, f, 500, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	tbl.Release()
	rec.Release()

	spec := writeSpec(t, dir, "devices.yaml", stringsSpec)
	env := sinkEnv(pg.DSN, rd, ns)
	if r := precogEnv(t, dir, env, "run", spec); r.code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check := func(sink, key string, score float32, region string) {
		t.Helper()
		w, ok := want[key]
		if !ok {
			t.Fatalf("%s: key %s stored but its country is null", sink, key)
		}
		if math.Abs(float64(score-w.score)) > 1e-6 || region != w.region {
			t.Fatalf("%s %s: score %v region %q, want %v %q", sink, key, score, region, w.score, w.region)
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
	var pgRows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM device_scores`).Scan(&pgRows); err != nil || pgRows != len(want) {
		t.Fatalf("postgres: %d rows, %v; want %d", pgRows, err, len(want))
	}
	rows, err := conn.Query(ctx, `SELECT id, score, region FROM device_scores`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, region string
		var score float32
		if err := rows.Scan(&key, &score, &region); err != nil {
			t.Fatal(err)
		}
		check("postgres", key, score, region)
	}
	rows.Close()
	checked := 0
	for key := range want {
		if checked++; checked > 100 {
			break
		}
		raw, err := rc.Get(ctx, ns+":"+v+":"+key).Bytes()
		if err != nil {
			t.Fatalf("redis %s: %v", key, err)
		}
		var r struct {
			Score  float32 `json:"score"`
			Region string  `json:"region"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("redis %s: %v: %s", key, err, raw)
		}
		check("redis", key, r.Score, r.Region)
	}

	files, _ := filepath.Glob(filepath.Join(dir, "out/devices/*.parquet"))
	seen := 0
	for _, name := range files {
		rdr, err := file.OpenParquetFile(name, false)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := fr.ReadTable(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tr := array.NewTableReader(tb, 1024)
		for tr.Next() {
			rec := tr.RecordBatch()
			col := func(n string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(n)[0]) }
			keys, scores, regions := col("id").(*array.String), col("score").(*array.Float32), col("region").(*array.String)
			for i := range int(rec.NumRows()) {
				check("parquet", keys.Value(i), scores.Value(i), regions.Value(i))
				seen++
			}
		}
		tr.Release()
		tb.Release()
		rdr.Close()
	}
	if seen != len(want) {
		t.Fatalf("parquet: %d rows, want %d", seen, len(want))
	}
}
