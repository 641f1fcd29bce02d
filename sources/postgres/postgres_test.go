package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

func TestCheckQuery(t *testing.T) {
	ok := []string{
		"SELECT 1",
		"SELECT ';' AS a",
		"SELECT 'it''s;' AS a",
		`SELECT E'\';' AS a`,
		`SELECT 1 AS ";"`,
		"SELECT $$;$$ AS a",
		"SELECT $fn$ ; $ $fn$ AS a",
		"SELECT 1 -- trailing; comment",
		"SELECT 1 /* a ; /* nested ; */ still ; */",
		"WITH x AS (SELECT 1 AS a) SELECT a FROM x",
		"SELECT a$b FROM (SELECT 1 AS a$b) s",
	}
	for _, q := range ok {
		if err := checkQuery(q); err != nil {
			t.Errorf("checkQuery(%q) = %v, want nil", q, err)
		}
	}
	bad := map[string]string{
		"SELECT 1;":                    "trailing semicolon",
		"SELECT 1; -- done\n":          "trailing semicolon",
		"SELECT 1; SELECT 2":           "several statements",
		"SELECT 1; DROP TABLE users":   "several statements",
		"":                             "is empty",
		"  -- nothing\n /* here */ ":   "is empty",
		"SELECT 'open":                 "unterminated string",
		`SELECT "open`:                 "unterminated quoted identifier",
		"SELECT 1 /* open":             "unterminated /* comment",
		"SELECT $x$ open":              "unterminated $x$ string",
		"SELECT 1\n;\nSELECT 2":        "line 2 column 1",
		"SELECT E'\\'';' ; SELECT 1":   "several statements",
		"SELECT 'a' ; SELECT ';'":      "several statements",
		"SELECT 1 /* ; */ ; SELECT 2 ": "several statements",
	}
	for q, want := range bad {
		err := checkQuery(q)
		if err == nil {
			t.Errorf("checkQuery(%q) = nil, want error with %q", q, want)
			continue
		}
		if want == "trailing semicolon" {
			want = "without the trailing semicolon"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("checkQuery(%q) = %v, want it to contain %q", q, err, want)
		}
	}
}

func TestSplitRange(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	cases := []struct {
		name          string
		lo, hi        int64
		count, perSh  int64
		want          []rng
		wantRowsTotal int64
	}{
		{"even", 1, 1000, 1000, 100, nil, 1000},
		{"negative", -500, 499, 1000, 250, []rng{{-500, p(-250)}, {-250, p(0)}, {0, p(250)}, {250, p(500)}}, 1000},
		{"single", 42, 42, 1, 100, []rng{{42, p(43)}}, 1},
		{"duplicates capped by span", 7, 8, 1000, 10, []rng{{7, p(8)}, {8, p(9)}}, 1000},
		{"full int64", math.MinInt64, math.MaxInt64, 3, 1, []rng{{math.MinInt64, p(-3074457345618258603)}, {-3074457345618258603, p(3074457345618258602)}, {3074457345618258602, nil}}, 3},
		{"max at top", math.MaxInt64 - 1, math.MaxInt64, 2, 1, []rng{{math.MaxInt64 - 1, p(math.MaxInt64)}, {math.MaxInt64, nil}}, 2},
	}
	for _, c := range cases {
		got := splitRange("q", "id", &c.lo, &c.hi, c.count, c.perSh)
		var total int64
		for i, sp := range got {
			total += sp.Rows
			if i > 0 && (got[i-1].Hi == nil || *got[i-1].Hi != sp.Lo) {
				t.Errorf("%s: shard %d starts at %d, previous ends at %v", c.name, i, sp.Lo, got[i-1].Hi)
			}
		}
		if total != c.wantRowsTotal {
			t.Errorf("%s: estimates sum to %d, want %d", c.name, total, c.wantRowsTotal)
		}
		if got[0].Lo != c.lo {
			t.Errorf("%s: first shard starts at %d, want %d", c.name, got[0].Lo, c.lo)
		}
		if last := got[len(got)-1]; c.hi == math.MaxInt64 && last.Hi != nil || c.hi != math.MaxInt64 && *last.Hi != c.hi+1 {
			t.Errorf("%s: last shard ends at %v, want past %d", c.name, last.Hi, c.hi)
		}
		if c.want == nil {
			if n := int64(len(got)); n != (c.count+c.perSh-1)/c.perSh {
				t.Errorf("%s: %d shards, want %d", c.name, n, (c.count+c.perSh-1)/c.perSh)
			}
			continue
		}
		var gotR []rng
		for _, sp := range got {
			gotR = append(gotR, rng{sp.Lo, sp.Hi})
		}
		if !reflect.DeepEqual(gotR, c.want) {
			t.Errorf("%s: ranges %v, want %v", c.name, fmtR(gotR), fmtR(c.want))
		}
	}
	if got := splitRange("q", "id", nil, nil, 0, 10); len(got) != 0 {
		t.Errorf("zero rows: %d shards", len(got))
	}
}

// rng is a planned range for comparisons.
type rng struct {
	lo int64
	hi *int64
}

func (r rng) String() string {
	if r.hi == nil {
		return fmt.Sprintf("[%d,max]", r.lo)
	}
	return fmt.Sprintf("[%d,%d)", r.lo, *r.hi)
}

func fmtR(rs []rng) string { return fmt.Sprint(rs) }

func TestSchemaTypes(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	pg.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'happy')`)
	pg.Exec(t, `CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)`)
	pg.Exec(t, `CREATE TABLE t (
		i2 int2, i4 int4, i8 bigint, f4 real, f8 double precision, num numeric(10,3),
		txt text, vc varchar(10), bp char(4), u uuid, b bool,
		af4 real[], af8 float8[], ai2 int2[], ai4 int[], ai8 int8[], anum numeric[],
		m mood, d posint, ts timestamptz, j jsonb, atext text[])`)
	s := newSource(t, pg, "SELECT * FROM t", "i8")
	sc, err := s.Schema(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]arrow.DataType{
		"i2": arrow.PrimitiveTypes.Int16, "i4": arrow.PrimitiveTypes.Int32, "i8": arrow.PrimitiveTypes.Int64,
		"f4": arrow.PrimitiveTypes.Float32, "f8": arrow.PrimitiveTypes.Float64, "num": arrow.PrimitiveTypes.Float64,
		"txt": arrow.BinaryTypes.String, "vc": arrow.BinaryTypes.String, "bp": arrow.BinaryTypes.String,
		"u": arrow.BinaryTypes.String, "b": arrow.FixedWidthTypes.Boolean,
		"af4": arrow.ListOf(arrow.PrimitiveTypes.Float32), "af8": arrow.ListOf(arrow.PrimitiveTypes.Float64),
		"ai2": arrow.ListOf(arrow.PrimitiveTypes.Int16), "ai4": arrow.ListOf(arrow.PrimitiveTypes.Int32),
		"ai8": arrow.ListOf(arrow.PrimitiveTypes.Int64), "anum": arrow.ListOf(arrow.PrimitiveTypes.Float64),
		"m": arrow.BinaryTypes.String, "d": arrow.PrimitiveTypes.Int32,
		"ts": arrow.Null, "j": arrow.Null, "atext": arrow.Null,
	}
	if sc.NumFields() != len(want) {
		t.Fatalf("schema has %d fields, want %d: %s", sc.NumFields(), len(want), sc)
	}
	order := []string{"i2", "i4", "i8", "f4", "f8", "num", "txt", "vc", "bp", "u", "b", "af4", "af8", "ai2", "ai4", "ai8", "anum", "m", "d", "ts", "j", "atext"}
	for i, f := range sc.Fields() {
		if f.Name != order[i] {
			t.Errorf("field %d is %q, want %q", i, f.Name, order[i])
		}
		if !arrow.TypeEqual(f.Type, want[f.Name]) {
			t.Errorf("field %q is %s, want %s", f.Name, f.Type, want[f.Name])
		}
	}
	pgType := func(name string) string {
		f, _ := sc.FieldsByName(name)
		v, _ := f[0].Metadata.GetValue(metaPGType)
		return v
	}
	if got := pgType("ts"); got != "timestamptz" {
		t.Errorf("ts postgres.type = %q, want timestamptz", got)
	}
	if got := pgType("m"); got != "mood" {
		t.Errorf("m postgres.type = %q, want mood", got)
	}

	// Values of every type round-trip; an unsupported column is refused by
	// name and type only when read.
	pg.Exec(t, `INSERT INTO t VALUES (
		-2, -4, -8, 1.5, 2.25, 1234.567, 'héllo', 'vc', 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true,
		'{1.5,NULL,3}', '{}', '{1,2}', '{3}', '{9223372036854775807}', '{0.5,1.25}',
		'happy', 7, now(), '{}', '{a}')`)
	pg.Exec(t, `INSERT INTO t (i8) VALUES (1)`)
	cols := order[:19]
	plans := plan(t, s, 100)
	if len(plans) != 1 {
		t.Fatalf("%d shards, want 1", len(plans))
	}
	recs := readAll(t, s, plans[0], cols, 10)
	defer release(recs)
	if len(recs) != 1 || recs[0].NumRows() != 2 {
		t.Fatalf("got %d batches, want one of 2 rows", len(recs))
	}
	rec := recs[0]
	got := make(map[string]string)
	for i, c := range cols {
		col := rec.Column(i)
		got[c] = col.ValueStr(0)
		if !arrow.TypeEqual(col.DataType(), want[c]) {
			t.Errorf("column %q read as %s, want %s", c, col.DataType(), want[c])
		}
		if c != "i8" && col.IsValid(1) {
			t.Errorf("column %q row 1 is %s, want null", c, col.ValueStr(1))
		}
	}
	wantVals := map[string]string{
		"i2": "-2", "i4": "-4", "i8": "-8", "f4": "1.5", "f8": "2.25", "num": "1234.567",
		"txt": "héllo", "vc": "vc", "bp": "ab", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "b": "true",
		"af4": "[1.5,null,3]", "af8": "[]", "ai2": "[1,2]", "ai4": "[3]", "ai8": "[9223372036854775807]",
		"anum": "[0.5,1.25]", "m": "happy", "d": "7",
	}
	for c, w := range wantVals {
		if got[c] != w {
			t.Errorf("column %q = %s, want %s", c, got[c], w)
		}
	}

	for _, c := range []string{"ts", "j", "atext"} {
		_, err = s.Open(testCtx(t), plans[0].Plan, sources.ReadOptions{Columns: []string{"i8", c}})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("column %q has type %s", c, pgType(c))) {
			t.Errorf("reading unsupported column %s: err = %v, want it named with its type", c, err)
		}
	}
	_, err = s.Open(testCtx(t), plans[0].Plan, sources.ReadOptions{Columns: []string{"nope"}})
	if err == nil || !strings.Contains(err.Error(), `column "nope" is not in the query's result`) {
		t.Errorf("reading a missing column: err = %v", err)
	}
}

func TestVectorByTypeName(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	// pgvector is not installed here. A base type called vector (stored as
	// text) with a cast to real[], as pgvector has, exercises the detection
	// by type name and the cast.
	pg.Exec(t, `CREATE TYPE vector`)
	pg.Exec(t, `CREATE FUNCTION vector_in(cstring) RETURNS vector LANGUAGE internal IMMUTABLE STRICT AS 'textin'`)
	pg.Exec(t, `CREATE FUNCTION vector_out(vector) RETURNS cstring LANGUAGE internal IMMUTABLE STRICT AS 'textout'`)
	pg.Exec(t, `CREATE TYPE vector (INPUT = vector_in, OUTPUT = vector_out, INTERNALLENGTH = VARIABLE, STORAGE = extended)`)
	pg.Exec(t, `CREATE FUNCTION vector_to_real(vector) RETURNS real[] LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT $1::text::real[] $$`)
	pg.Exec(t, `CREATE CAST (vector AS real[]) WITH FUNCTION vector_to_real(vector)`)
	pg.Exec(t, `CREATE TABLE e (id int8, emb vector)`)
	pg.Exec(t, `INSERT INTO e VALUES (1, '{0.25,0.5}'), (2, NULL)`)
	s := newSource(t, pg, "SELECT id, emb FROM e ORDER BY id", "id")
	sc, err := s.Schema(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if f := sc.Field(1); !arrow.TypeEqual(f.Type, arrow.ListOf(arrow.PrimitiveTypes.Float32)) {
		t.Fatalf("vector column is %s, want list<float32>", f.Type)
	}
	recs := readAll(t, s, plan(t, s, 10)[0], nil, 10)
	defer release(recs)
	if got := recs[0].Column(1).ValueStr(0); got != "[0.25,0.5]" {
		t.Errorf("vector value %s", got)
	}
	if recs[0].Column(1).IsValid(1) {
		t.Error("NULL vector is not null")
	}
}

// readIDs plans the query and reads every shard's id column (column 0),
// checking row estimates are non-negative.
func readIDs(t *testing.T, s *Source, rowsPerShard int64, batch int) (plans []sources.ShardPlan, ids []int64, nulls int) {
	t.Helper()
	plans = plan(t, s, rowsPerShard)
	for _, sp := range plans {
		if sp.Rows < 0 {
			t.Errorf("shard %s estimates %d rows", sp.Desc, sp.Rows)
		}
		recs := readAll(t, s, sp, []string{"id"}, batch)
		vals, valid := int64s(t, recs, 0)
		release(recs)
		for i, v := range vals {
			if valid[i] {
				ids = append(ids, v)
			} else {
				nulls++
			}
		}
	}
	slices.Sort(ids)
	return plans, ids, nulls
}

func seq(lo, hi int64) []int64 {
	var out []int64
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestPlanRanges(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	pg.Exec(t, `CREATE TABLE dense (id int4, v real)`)
	pg.Exec(t, `INSERT INTO dense SELECT i, i / 2.0 FROM generate_series(-500, 499) i`)
	pg.Exec(t, `CREATE TABLE sparse (id int8)`)
	pg.Exec(t, `INSERT INTO sparse VALUES (-9223372036854775808), (3), (10), (1000000000), (9223372036854775807)`)
	pg.Exec(t, `CREATE TABLE one (id int2)`)
	pg.Exec(t, `INSERT INTO one VALUES (17)`)
	pg.Exec(t, `CREATE TABLE empty (id int8)`)
	pg.Exec(t, `CREATE TABLE withnull (id int8)`)
	pg.Exec(t, `INSERT INTO withnull SELECT CASE WHEN i % 10 = 0 THEN NULL ELSE i END FROM generate_series(1, 100) i`)
	pg.Exec(t, `CREATE TABLE allnull (id int8)`)
	pg.Exec(t, `INSERT INTO allnull SELECT NULL FROM generate_series(1, 5)`)

	t.Run("dense negative", func(t *testing.T) {
		s := newSource(t, pg, "SELECT id, v FROM dense", "id")
		plans, ids, nulls := readIDs(t, s, 100, 33)
		if len(plans) != 10 || nulls != 0 {
			t.Fatalf("%d shards, %d nulls; want 10, 0", len(plans), nulls)
		}
		var sp shardPlan
		if err := json.Unmarshal(plans[0].Plan, &sp); err != nil {
			t.Fatal(err)
		}
		if sp.Kind != kindRange || sp.Lo != -500 || sp.Hi == nil || *sp.Hi != -400 || sp.Rows != 100 {
			t.Errorf("first shard %+v, want [-500,-400) of 100 rows", sp)
		}
		if plans[0].Desc != "query id [-500,-400)" || plans[0].Rows != 100 {
			t.Errorf("first shard desc %q rows %d", plans[0].Desc, plans[0].Rows)
		}
		if !slices.Equal(ids, seq(-500, 499)) {
			t.Errorf("read %d ids, want -500..499 exactly once", len(ids))
		}
		// Stable: the same data plans the same shards.
		again := plan(t, s, 100)
		if !reflect.DeepEqual(plans, again) {
			t.Error("planning twice gave different shards")
		}
	})
	t.Run("sparse full range", func(t *testing.T) {
		s := newSource(t, pg, "SELECT id FROM sparse", "id")
		plans, ids, _ := readIDs(t, s, 2, 1)
		if len(plans) != 3 {
			t.Errorf("%d shards, want 3", len(plans))
		}
		want := []int64{math.MinInt64, 3, 10, 1000000000, math.MaxInt64}
		if !slices.Equal(ids, want) {
			t.Errorf("ids %v, want %v", ids, want)
		}
	})
	t.Run("single row", func(t *testing.T) {
		s := newSource(t, pg, "SELECT id FROM one", "id")
		plans, ids, _ := readIDs(t, s, 1000, 10)
		if len(plans) != 1 || plans[0].Rows != 1 || !slices.Equal(ids, []int64{17}) {
			t.Errorf("plans %v ids %v", plans, ids)
		}
	})
	t.Run("zero rows", func(t *testing.T) {
		s := newSource(t, pg, "SELECT id FROM empty", "id")
		if plans := plan(t, s, 10); len(plans) != 0 {
			t.Errorf("%d shards for zero rows", len(plans))
		}
		s = newSource(t, pg, "SELECT id FROM dense WHERE false", "id")
		if plans := plan(t, s, 10); len(plans) != 0 {
			t.Errorf("%d shards for a query returning nothing", len(plans))
		}
	})
	t.Run("null shard_by values", func(t *testing.T) {
		s := newSource(t, pg, "SELECT id FROM withnull", "id")
		plans, ids, nulls := readIDs(t, s, 30, 4)
		last := plans[len(plans)-1]
		if last.Desc != "query id IS NULL" || last.Rows != 10 {
			t.Errorf("last shard %q rows %d, want the NULL shard of 10", last.Desc, last.Rows)
		}
		if nulls != 10 || len(ids) != 90 {
			t.Errorf("read %d ids and %d nulls, want 90 and 10", len(ids), nulls)
		}
		s = newSource(t, pg, "SELECT id FROM allnull", "id")
		plans, _, nulls = readIDs(t, s, 30, 4)
		if len(plans) != 1 || nulls != 5 {
			t.Errorf("all-NULL: %d shards, %d nulls; want 1, 5", len(plans), nulls)
		}
	})
	t.Run("bad shard_by", func(t *testing.T) {
		s := newSource(t, pg, "SELECT id, v FROM dense", "v")
		_, err := s.Plan(testCtx(t), 10)
		if err == nil || !strings.Contains(err.Error(), `source.postgres.shard_by: column "v" is float4, want an integer column`) {
			t.Errorf("float shard_by: %v", err)
		}
		s = newSource(t, pg, "SELECT id, v FROM dense", "nope")
		_, err = s.Plan(testCtx(t), 10)
		if err == nil || !strings.Contains(err.Error(), `source.postgres.shard_by: column "nope" is not in the query's result (columns: id, v)`) {
			t.Errorf("missing shard_by: %v", err)
		}
		if _, err := s.Plan(testCtx(t), 0); err == nil {
			t.Error("Plan(0) succeeded")
		}
	})
}

func TestHashShards(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	pg.Exec(t, `CREATE TABLE u (id int8, k text)`)
	pg.Exec(t, `INSERT INTO u SELECT i, CASE WHEN i = 5 THEN NULL ELSE 'user-' || i END FROM generate_series(1, 1000) i`)
	_, err := New(testCtx(t), jobs.PostgresSourceSpec{DSN: pg.DSN, Query: "SELECT id, k FROM u"})
	if err == nil || !strings.Contains(err.Error(), "source.postgres.shard_by is required") {
		t.Fatalf("no shard_by and no key: err = %v", err)
	}
	s := newSource(t, pg, "SELECT id, k FROM u", "", WithKey("k"))
	plans, ids, _ := readIDs(t, s, 300, 64)
	if len(plans) != 4 {
		t.Fatalf("%d hash shards, want 4", len(plans))
	}
	if !slices.Equal(ids, seq(1, 1000)) {
		t.Errorf("hash shards read %d ids, want 1..1000 exactly once", len(ids))
	}
	var est int64
	for _, sp := range plans {
		est += sp.Rows
		recs := readAll(t, s, sp, []string{"id"}, 1000)
		n := 0
		for _, r := range recs {
			n += int(r.NumRows())
		}
		release(recs)
		if n < 150 || n > 350 {
			t.Errorf("hash shard %s holds %d rows, want about 250", sp.Desc, n)
		}
	}
	if est != 1000 {
		t.Errorf("estimates sum to %d", est)
	}
	if plans[2].Desc != "query hash(k) % 4 = 2" {
		t.Errorf("desc %q", plans[2].Desc)
	}
	// The NULL key lands in shard 0, where the runner reports it.
	recs := readAll(t, s, plans[0], []string{"id", "k"}, 1000)
	defer release(recs)
	found := false
	for _, r := range recs {
		k := r.Column(1)
		for i := 0; i < k.Len(); i++ {
			if k.IsNull(i) {
				found = true
			}
		}
	}
	if !found {
		t.Error("the NULL key is not in hash shard 0")
	}
	if _, err := newSource(t, pg, "SELECT id FROM u", "", WithKey("k")).Plan(testCtx(t), 10); err == nil || !strings.Contains(err.Error(), `source.key: column "k" is not in the query's result`) {
		t.Errorf("missing key: %v", err)
	}
}

func TestStreamBatchesProjectionNulls(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	pg.Exec(t, `CREATE TABLE f (id int8 PRIMARY KEY, "Mixed Case" real, name text, emb real[])`)
	pg.Exec(t, `INSERT INTO f SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE i * 0.5 END, 'n' || i,
		CASE WHEN i % 11 = 0 THEN NULL ELSE ARRAY[i, CASE WHEN i % 5 = 0 THEN NULL ELSE i + 1 END]::real[] END
		FROM generate_series(0, 9999) i`)
	// A trailing line comment must not swallow the wrapper.
	s := newSource(t, pg, "SELECT * FROM f ORDER BY id -- newest last", "id")
	plans := plan(t, s, 10000)
	if len(plans) != 1 {
		t.Fatalf("%d shards", len(plans))
	}
	for _, batch := range []int{1, 7, 1000, 4096, 20000} {
		recs := readAll(t, s, plans[0], []string{"emb", "Mixed Case", "id"}, batch)
		total := 0
		for i, rec := range recs {
			if got := rec.Schema().Field(0).Name + "," + rec.Schema().Field(1).Name + "," + rec.Schema().Field(2).Name; got != "emb,Mixed Case,id" {
				t.Fatalf("projection order %s", got)
			}
			if n := int(rec.NumRows()); n != min(batch, 10000-total) {
				t.Fatalf("batch size %d: batch %d has %d rows", batch, i, n)
			}
			emb := rec.Column(0).(*array.List)
			mc := rec.Column(1).(*array.Float32)
			id := rec.Column(2).(*array.Int64)
			vals := emb.ListValues().(*array.Float32)
			for r := 0; r < int(rec.NumRows()); r++ {
				want := int64(total + r)
				if id.Value(r) != want {
					t.Fatalf("row %d id %d", want, id.Value(r))
				}
				if want%7 == 0 != mc.IsNull(r) || mc.IsValid(r) && mc.Value(r) != float32(want)/2 {
					t.Fatalf("row %d Mixed Case = %s", want, mc.ValueStr(r))
				}
				s, e := emb.ValueOffsets(r)
				switch {
				case want%11 == 0:
					if emb.IsValid(r) || e != s {
						t.Fatalf("row %d emb = %s, want null", want, emb.ValueStr(r))
					}
				case e-s != 2 || vals.Value(int(s)) != float32(want) || vals.IsNull(int(s)):
					t.Fatalf("row %d emb = %s", want, emb.ValueStr(r))
				case want%5 == 0 && vals.IsValid(int(s)+1), want%5 != 0 && vals.Value(int(s)+1) != float32(want+1):
					t.Fatalf("row %d emb = %s", want, emb.ValueStr(r))
				}
			}
			total += int(rec.NumRows())
		}
		release(recs)
		if total != 10000 {
			t.Errorf("batch size %d: read %d rows", batch, total)
		}
	}
}

func TestPositionAndErrorsMidStream(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	pg.Exec(t, `CREATE TABLE p (id int4, v real[])`)
	pg.Exec(t, `INSERT INTO p SELECT i, ARRAY[i]::real[] FROM generate_series(100, 199) i`)
	pg.Exec(t, `UPDATE p SET v = '{{1,2},{3,4}}' WHERE id = 150`)
	s := newSource(t, pg, "SELECT id, v FROM p ORDER BY id", "id")
	plans := plan(t, s, 50)
	if len(plans) != 2 {
		t.Fatalf("%d shards", len(plans))
	}
	ctx := testCtx(t)
	r, err := s.Open(ctx, plans[0].Plan, sources.ReadOptions{Columns: []string{"id"}, BatchSize: 20})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := r.Next(ctx)
	rec.Release()
	rec, _ = r.Next(ctx)
	rec.Release()
	if got, want := r.Position(3), "postgres query shard id [100,150) row 23 (id=123)"; got != want {
		t.Errorf("Position = %q, want %q", got, want)
	}
	r.Close()

	// A two-dimensional array fails naming shard, row and column.
	r, err = s.Open(ctx, plans[1].Plan, sources.ReadOptions{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), `shard id [150,200) row 0 column "v": 2-dimensional array`) {
		t.Errorf("2-d array: err = %v", err)
	}
	if _, err2 := r.Next(ctx); err2 == nil {
		t.Error("Next after an error succeeded")
	}

	// A runtime error of the query (division by zero at id 160) surfaces
	// with Postgres's message.
	s = newSource(t, pg, "SELECT id, 1 / (id - 160) AS x FROM p", "id")
	plans = plan(t, s, 100)
	r2, err := s.Open(ctx, plans[0].Plan, sources.ReadOptions{BatchSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	_, err = r2.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "division by zero") || !strings.Contains(err.Error(), "22012") {
		t.Errorf("runtime error: %v", err)
	}
}

func TestQueryErrors(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	pg.Exec(t, `CREATE TABLE t (id int8, a int4, b int4)`)
	ctx := testCtx(t)
	for _, q := range []string{"SELECT id FROM t;", "SELECT id FROM t; DELETE FROM t"} {
		_, err := New(ctx, jobs.PostgresSourceSpec{DSN: pg.DSN, Query: q, ShardBy: "id"})
		if err == nil || !strings.Contains(err.Error(), "source.postgres.query") {
			t.Errorf("New(%q) err = %v", q, err)
		}
	}
	s := newSource(t, pg, "SELECT id\nFROM no_such_table", "id")
	_, err := s.Schema(ctx)
	if err == nil || !strings.Contains(err.Error(), `relation "no_such_table" does not exist`) || !strings.Contains(err.Error(), "at line 2 column 6") {
		t.Errorf("bad table: %v", err)
	}
	_, err = s.Plan(ctx, 10)
	if err == nil || !strings.Contains(err.Error(), `relation "no_such_table" does not exist`) {
		t.Errorf("plan on bad table: %v", err)
	}
	s = newSource(t, pg, "SELEC id FROM t", "id")
	if _, err := s.Schema(ctx); err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("syntax error: %v", err)
	}
	s = newSource(t, pg, "SELECT a AS x, b AS x, id FROM t", "id")
	if _, err := s.Schema(ctx); err == nil || !strings.Contains(err.Error(), `returns column "x" twice`) {
		t.Errorf("duplicate column: %v", err)
	}
	// Data-modifying statements cannot hide in the query: sessions are read-only.
	s = newSource(t, pg, "SELECT id, nextval('sq') AS n FROM t", "id")
	pg.Exec(t, `CREATE SEQUENCE sq`)
	pg.Exec(t, `INSERT INTO t VALUES (1, 1, 1)`)
	if _, err := s.Plan(ctx, 10); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("nextval in a read-only session: %v", err)
	}
	// A plan is bound to the query text it was made for.
	s1 := newSource(t, pg, "SELECT id FROM t", "id")
	plans := plan(t, s1, 10)
	s2 := newSource(t, pg, "SELECT id FROM t WHERE id > 0", "id")
	if _, err := s2.Open(ctx, plans[0].Plan, sources.ReadOptions{}); err == nil || !strings.Contains(err.Error(), "planned for another source.postgres.query") {
		t.Errorf("plan of another query: %v", err)
	}
	for _, bad := range []string{``, `{}`, `{"kind":"range"}`, `{"kind":"hash","column":"id","mod":0}`, `{"kind":"range","column":"id","lo":5,"hi":5}`, `{"kind":"x","column":"id"}`, `{"kind":"null","column":"id","extra":1}`, `[1]`} {
		if _, err := s1.Open(ctx, json.RawMessage(bad), sources.ReadOptions{}); err == nil || !strings.Contains(err.Error(), "bad shard plan") {
			t.Errorf("Open(%s) err = %v", bad, err)
		}
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx := testCtx(t)
	start := time.Now()
	_, err = New(ctx, jobs.PostgresSourceSpec{DSN: "postgres://bob:s3cr3tpw@" + addr + "/db?sslmode=disable", Query: "SELECT 1 AS id", ShardBy: "id"})
	if err == nil {
		t.Fatal("New on a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "connecting to "+addr) {
		t.Errorf("error does not name %s: %v", addr, err)
	}
	if strings.Contains(err.Error(), "s3cr3tpw") {
		t.Errorf("error leaks the password: %v", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	_, err = New(ctx, jobs.PostgresSourceSpec{DSN: "postgres://bob:s3cr3tpw@host:notaport/db", Query: "SELECT 1 AS id", ShardBy: "id"})
	if err == nil || strings.Contains(err.Error(), "s3cr3tpw") || !strings.Contains(err.Error(), "source.postgres.dsn") {
		t.Errorf("bad DSN: %v", err)
	}
	_, err = New(ctx, jobs.PostgresSourceSpec{Query: "SELECT 1 AS id", ShardBy: "id"})
	if err == nil || !strings.Contains(err.Error(), "source.postgres.dsn is empty") {
		t.Errorf("empty DSN: %v", err)
	}
}

func TestEarlyCloseAndCancel(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSource(t, pg, "SELECT i AS id, repeat('x', 100) AS pad FROM generate_series(1, 3000000) i", "id")
	plans := plan(t, s, 10_000_000)
	ctx := testCtx(t)
	r, err := s.Open(ctx, plans[0].Plan, sources.ReadOptions{BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closing mid-shard took %s (drained the result?)", d)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	r, err = s.Open(cctx, plans[0].Plan, sources.ReadOptions{BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err = r.Next(cctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	cancel()
	if _, err := r.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v", err)
	}
	if _, err := r.Next(ctx); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("Next after a failed Next: %v", err)
	}
}
