package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pgo "github.com/parquet-go/parquet-go"

	"github.com/precog-ml/precog/sources"
	"github.com/precog-ml/precog/sources/parquet/parquettest"
)

func TestResolveFileDirGlob(t *testing.T) {
	dir := t.TempDir()
	files := []string{
		"dt=2026-11-02/part-1.parquet",
		"dt=2026-11-01/part-1.parquet",
		"dt=2026-11-01/part-0.parquet",
		"dt=2026-11-01/nested/deep.parquet",
	}
	for i, f := range files {
		writePgFile(t, filepath.Join(dir, f), int64(i*10), 10, 10)
	}
	// Files the directory walk and globs must skip.
	for _, f := range []string{"dt=2026-11-01/_SUCCESS", "dt=2026-11-01/.part-2.parquet.crc", "_tmp/x.parquet", ".hidden/y.parquet", "dt=2026-11-01/notes.txt", "dt=2026-11-01/_part-9.parquet"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not parquet"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			r, err := filepath.Rel(dir, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	tests := []struct {
		path string
		want []string
	}{
		{filepath.Join(dir, "dt=2026-11-01/part-1.parquet"), []string{"dt=2026-11-01/part-1.parquet"}},
		{dir, []string{"dt=2026-11-01/nested/deep.parquet", "dt=2026-11-01/part-0.parquet", "dt=2026-11-01/part-1.parquet", "dt=2026-11-02/part-1.parquet"}},
		{filepath.Join(dir, "dt=*/*.parquet"), []string{"dt=2026-11-01/part-0.parquet", "dt=2026-11-01/part-1.parquet", "dt=2026-11-02/part-1.parquet"}},
		{filepath.Join(dir, "dt=2026-11-0[2]"), []string{"dt=2026-11-02/part-1.parquet"}},
		{filepath.Join(dir, "dt=2026-11-01/*"), []string{"dt=2026-11-01/nested/deep.parquet", "dt=2026-11-01/notes.txt", "dt=2026-11-01/part-0.parquet", "dt=2026-11-01/part-1.parquet"}},
	}
	for _, tt := range tests {
		s, err := New(tt.path)
		if err != nil {
			t.Fatalf("New(%s): %v", tt.path, err)
		}
		if got := rel(s.Files()); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("New(%s) files = %v, want %v", tt.path, got, tt.want)
		}
	}

	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{empty, filepath.Join(dir, "nope.parquet"), filepath.Join(dir, "dt=1999-*/*.parquet"), filepath.Join(dir, "[")} {
		_, err := New(bad)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("New(%s) = %v, want an error naming the path", bad, err)
		}
	}
	if _, err := New(""); err == nil {
		t.Error("New(\"\") succeeded")
	}
}

func TestPlanPacksAndSplitsRowGroups(t *testing.T) {
	dir := t.TempDir()
	// Row groups of 100 rows in a 1000-row file, plus a file with one
	// 1000-row row group.
	writePgFile(t, filepath.Join(dir, "a.parquet"), 0, 1000, 100)
	writePgFile(t, filepath.Join(dir, "b.parquet"), 1000, 1000, 1000)
	s := mustNew(t, dir)
	plans := mustPlan(t, s, 250)

	var got []shardPlan
	for _, p := range plans {
		sp, err := decodePlan(p.Plan)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Rows != p.Rows || p.Rows > 250 {
			t.Fatalf("shard %s: plan rows %d, ShardPlan.Rows %d", p.Desc, sp.Rows, p.Rows)
		}
		got = append(got, sp)
	}
	type span struct {
		file          string
		first, n      int
		offset, count int64
	}
	var spans []span
	for _, sp := range got {
		spans = append(spans, span{filepath.Base(sp.File), sp.FirstRowGroup, sp.NumRowGroups, sp.Offset, sp.Rows})
	}
	want := []span{
		{"a.parquet", 0, 2, 0, 200}, {"a.parquet", 2, 2, 0, 200}, {"a.parquet", 4, 2, 0, 200},
		{"a.parquet", 6, 2, 0, 200}, {"a.parquet", 8, 2, 0, 200},
		{"b.parquet", 0, 1, 0, 250}, {"b.parquet", 0, 1, 250, 250}, {"b.parquet", 0, 1, 500, 250}, {"b.parquet", 0, 1, 750, 250},
	}
	if !reflect.DeepEqual(spans, want) {
		t.Fatalf("plan = %+v\nwant %+v", spans, want)
	}
	if !strings.Contains(plans[6].Desc, "b.parquet rows 250..500 (row group 0)") {
		t.Errorf("desc = %q", plans[6].Desc)
	}

	// Uneven split: 1000 rows at 300 per shard → 4 shards of 250.
	for _, p := range mustPlan(t, mustNew(t, filepath.Join(dir, "b.parquet")), 300) {
		if p.Rows != 250 {
			t.Errorf("split shard has %d rows, want 250", p.Rows)
		}
	}

	// Stable: planning again gives identical bytes.
	again := mustPlan(t, s, 250)
	if len(again) != len(plans) {
		t.Fatalf("replan: %d shards, first %d", len(again), len(plans))
	}
	for i := range plans {
		if !bytes.Equal(plans[i].Plan, again[i].Plan) || plans[i].Desc != again[i].Desc {
			t.Errorf("shard %d differs on replan: %s vs %s", i, plans[i].Plan, again[i].Plan)
		}
	}

	// Every row read exactly once, in order, across all shards.
	recs := readShards(t, s, plans, sources.ReadOptions{Columns: []string{"id"}, BatchSize: 64})
	defer releaseAll(recs)
	ids := int64Column(t, recs, "id")
	if len(ids) != 2000 {
		t.Fatalf("read %d rows, want 2000", len(ids))
	}
	for i, id := range ids {
		if id != int64(i) {
			t.Fatalf("row %d has id %d", i, id)
		}
	}

	if _, err := s.Plan(context.Background(), 0); err == nil {
		t.Error("Plan(0) succeeded")
	}
}

func TestBatchSizesAndPosition(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.parquet")
	writePgFile(t, path, 0, 1000, 300) // row groups 300,300,300,100
	s := mustNew(t, path)
	ctx := context.Background()
	// 200 rows per shard splits each 300-row group in two; 600 packs two
	// row groups per shard.
	for _, c := range []struct{ rps, bs int }{{200, 1}, {200, 7}, {200, 64}, {200, 150}, {200, 5000}, {600, 7}, {600, 64}, {600, 1024}, {1000, 333}, {1000, 8192}, {1000, 9000}} {
		plans, bs := mustPlan(t, s, int64(c.rps)), c.bs
		var all []int64
		for _, p := range plans {
			r, err := s.Open(ctx, p.Plan, sources.ReadOptions{Columns: []string{"id", "key"}, BatchSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			var got int64
			for {
				rec, err := r.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				n := rec.NumRows()
				if left := p.Rows - got; n != min(int64(bs), left) {
					t.Fatalf("batch size %d, shard %s: got batch of %d rows with %d left", bs, p.Desc, n, left)
				}
				ids := rec.Column(0).(*array.Int64).Int64Values()
				keys := rec.Column(1).(*array.String)
				for i := range int(n) {
					if keys.Value(i) != makePgRow(ids[i]).Key {
						t.Fatalf("row %d: key %q id %d", i, keys.Value(i), ids[i])
					}
				}
				// The file has one id per row number.
				last := int(n) - 1
				if want := path + " row " + itoa(ids[last]); r.Position(last) != want {
					t.Fatalf("Position(%d) = %q, want %q", last, r.Position(last), want)
				}
				all = append(all, ids...)
				got += n
				rec.Release()
			}
			if _, err := r.Next(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("Next after EOF: %v", err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if len(all) != 1000 || !slices.IsSorted(all) || all[0] != 0 || all[999] != 999 {
			t.Fatalf("batch size %d: read %d ids, first %d", bs, len(all), all[0])
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestAllNumericWidthsAndProjection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n.parquet")
	writePgFile(t, path, 0, 500, 128)
	s := mustNew(t, path)
	sc, err := s.Schema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := map[string]arrow.DataType{
		"key": arrow.BinaryTypes.String, "id": arrow.PrimitiveTypes.Int64,
		"i8": arrow.PrimitiveTypes.Int8, "i16": arrow.PrimitiveTypes.Int16, "i32": arrow.PrimitiveTypes.Int32,
		"u8": arrow.PrimitiveTypes.Uint8, "u16": arrow.PrimitiveTypes.Uint16, "u32": arrow.PrimitiveTypes.Uint32, "u64": arrow.PrimitiveTypes.Uint64,
		"f32": arrow.PrimitiveTypes.Float32, "f64": arrow.PrimitiveTypes.Float64,
		"opt": arrow.PrimitiveTypes.Float64, "cat": arrow.BinaryTypes.String,
	}
	for name, typ := range wantTypes {
		idx := sc.FieldIndices(name)
		if len(idx) == 0 || !arrow.TypeEqual(sc.Field(idx[0]).Type, typ) {
			t.Errorf("schema column %s: %v, want %s", name, sc, typ)
		}
	}
	if f, _ := sc.FieldsByName("vec"); len(f) != 1 || f[0].Type.ID() != arrow.LIST {
		t.Errorf("vec column: %v", f)
	}

	cols := []string{"u64", "i8", "f32", "i16", "i32", "u8", "u16", "u32", "f64", "vec", "opt", "cat", "id"}
	recs := readShards(t, s, mustPlan(t, s, 200), sources.ReadOptions{Columns: cols, BatchSize: 100})
	defer releaseAll(recs)
	var row int64
	for _, rec := range recs {
		for i, c := range cols {
			if rec.Schema().Field(i).Name != c {
				t.Fatalf("column %d is %s, want %s", i, rec.Schema().Field(i).Name, c)
			}
		}
		if !rec.Schema().Equal(recs[0].Schema()) {
			t.Fatal("schema changes between batches")
		}
		for i := range int(rec.NumRows()) {
			w := makePgRow(row)
			got := pgRow{
				U64: rec.Column(0).(*array.Uint64).Value(i), I8: rec.Column(1).(*array.Int8).Value(i),
				F32: rec.Column(2).(*array.Float32).Value(i), I16: rec.Column(3).(*array.Int16).Value(i),
				I32: rec.Column(4).(*array.Int32).Value(i), U8: rec.Column(5).(*array.Uint8).Value(i),
				U16: rec.Column(6).(*array.Uint16).Value(i), U32: rec.Column(7).(*array.Uint32).Value(i),
				F64: rec.Column(8).(*array.Float64).Value(i), Cat: rec.Column(11).(*array.String).Value(i),
				ID: rec.Column(12).(*array.Int64).Value(i), Key: w.Key,
			}
			vec := rec.Column(9).(*array.List)
			start, end := vec.ValueOffsets(i)
			got.Vec = append([]float32(nil), vec.ListValues().(*array.Float32).Float32Values()[start:end]...)
			if opt := rec.Column(10).(*array.Float64); !opt.IsNull(i) {
				v := opt.Value(i)
				got.Opt = &v
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("row %d: got %+v, want %+v", row, got, w)
			}
			row++
		}
	}
	if row != 500 {
		t.Fatalf("read %d rows", row)
	}

	// A missing column is an error naming the column and the file.
	p := mustPlan(t, s, 1000)[0]
	_, err = s.Open(context.Background(), p.Plan, sources.ReadOptions{Columns: []string{"id", "nope"}})
	if err == nil || !strings.Contains(err.Error(), "nope") || !strings.Contains(err.Error(), path) {
		t.Errorf("missing column: %v", err)
	}
}

func TestArrowWrittenListsNullsAndKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.parquet")
	writeArrowFile(t, path, 0, 700, 256)
	s := mustNew(t, path)
	sc, err := s.Schema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Binary keys are delivered as strings; the fixed-size list survives
	// through the stored Arrow schema.
	want := []arrow.DataType{arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String, arrow.BinaryTypes.String, arrow.PrimitiveTypes.Float32,
		arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32), arrow.ListOf(arrow.PrimitiveTypes.Int32)}
	for i, typ := range want {
		if !arrow.TypeEqual(sc.Field(i).Type, typ) {
			t.Errorf("field %d: %s, want %s", i, sc.Field(i).Type, typ)
		}
	}
	recs := readShards(t, s, mustPlan(t, s, 300), sources.ReadOptions{BatchSize: 128})
	defer releaseAll(recs)
	var row int64
	for _, rec := range recs {
		if !rec.Schema().Equal(sc) {
			t.Fatalf("batch schema %s\nwant %s", rec.Schema(), sc)
		}
		ids := rec.Column(0).(*array.Int64)
		bkey := rec.Column(1).(*array.String)
		name := rec.Column(2).(*array.String)
		score := rec.Column(3).(*array.Float32)
		emb := rec.Column(4).(*array.FixedSizeList)
		hist := rec.Column(5).(*array.List)
		for i := range int(rec.NumRows()) {
			if ids.Value(i) != row || bkey.Value(i) != "b"+pad6(row) {
				t.Fatalf("row %d: id %d key %q", row, ids.Value(i), bkey.Value(i))
			}
			if name.IsNull(i) != (row%7 == 3) || score.IsNull(i) != (row%4 == 1) || hist.IsNull(i) != (row%9 == 2) {
				t.Fatalf("row %d: nulls name=%v score=%v hist=%v", row, name.IsNull(i), score.IsNull(i), hist.IsNull(i))
			}
			if !score.IsNull(i) && score.Value(i) != float32(row)*1.5 {
				t.Fatalf("row %d: score %v", row, score.Value(i))
			}
			ev := emb.ListValues().(*array.Float32)
			for k := range 4 {
				if got := ev.Value((emb.Offset()+i)*4 + k); got != float32(row*10+int64(k)) {
					t.Fatalf("row %d emb[%d] = %v", row, k, got)
				}
			}
			if !hist.IsNull(i) {
				st, en := hist.ValueOffsets(i)
				if en-st != row%4 {
					t.Fatalf("row %d: hist len %d", row, en-st)
				}
				for k := st; k < en; k++ {
					if hist.ListValues().(*array.Int32).Value(int(k)) != int32(row+k-st) {
						t.Fatalf("row %d: hist %d", row, k-st)
					}
				}
			}
			row++
		}
	}
	if row != 700 {
		t.Fatalf("read %d rows", row)
	}
}

func pad6(n int64) string {
	s := itoa(n)
	return strings.Repeat("0", 6-len(s)) + s
}

func TestCodecsDictionaryAndPageV2(t *testing.T) {
	dir := t.TempDir()
	type variant struct {
		name  string
		write func(path string)
	}
	var vs []variant
	for _, c := range codecs {
		for _, v2 := range []bool{false, true} {
			suffix := c.name
			if v2 {
				suffix += "-v2"
			}
			vs = append(vs, variant{"arrow-dict-" + suffix, func(p string) {
				props := []pq.WriterProperty{pq.WithCompression(c.ar), pq.WithDictionaryDefault(true), pq.WithDataPageSize(2048)}
				if v2 {
					props = append(props, pq.WithDataPageVersion(pq.DataPageV2))
				}
				writeArrowFile(t, p, 0, 3000, 1000, props...)
			}})
			vs = append(vs, variant{"arrow-plain-" + suffix, func(p string) {
				props := []pq.WriterProperty{pq.WithCompression(c.ar), pq.WithDictionaryDefault(false)}
				if v2 {
					props = append(props, pq.WithDataPageVersion(pq.DataPageV2))
				}
				writeArrowFile(t, p, 0, 3000, 1000, props...)
			}})
			vs = append(vs, variant{"parquet-go-" + suffix, func(p string) {
				opts := []pgo.WriterOption{c.pg, pgo.PageBufferSize(4096)}
				if v2 {
					opts = append(opts, pgo.DataPageVersion(2))
				} else {
					opts = append(opts, pgo.DataPageVersion(1))
				}
				writePgFile(t, p, 0, 3000, 1000, opts...)
			}})
		}
	}
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			path := filepath.Join(dir, v.name+".parquet")
			v.write(path)
			s := mustNew(t, path)
			cols := []string{"id"}
			if strings.HasPrefix(v.name, "arrow") {
				cols = append(cols, "name", "score")
			} else {
				cols = append(cols, "cat", "opt")
			}
			recs := readShards(t, s, mustPlan(t, s, 700), sources.ReadOptions{Columns: cols, BatchSize: 333})
			defer releaseAll(recs)
			var row int64
			for _, rec := range recs {
				strs := rec.Column(1).(*array.String)
				nums := rec.Column(2)
				for i := range int(rec.NumRows()) {
					if id := rec.Column(0).(*array.Int64).Value(i); id != row {
						t.Fatalf("row %d: id %d", row, id)
					}
					var wantStr string
					var wantNull bool
					if strings.HasPrefix(v.name, "arrow") {
						wantStr, wantNull = "", row%4 == 1
						if row%7 != 3 {
							wantStr = "name-" + itoa(row%11)
						}
						if strs.IsNull(i) != (row%7 == 3) {
							t.Fatalf("row %d: name null = %v", row, strs.IsNull(i))
						}
					} else {
						wantStr, wantNull = makePgRow(row).Cat, row%5 == 0
					}
					if !strs.IsNull(i) && strs.Value(i) != wantStr {
						t.Fatalf("row %d: string %q, want %q", row, strs.Value(i), wantStr)
					}
					if nums.IsNull(i) != wantNull {
						t.Fatalf("row %d: null = %v, want %v", row, nums.IsNull(i), wantNull)
					}
					row++
				}
			}
			if row != 3000 {
				t.Fatalf("read %d rows", row)
			}
		})
	}
}

func TestIntegerKeys(t *testing.T) {
	type row struct {
		UserID int64   `parquet:"user_id"`
		Small  int32   `parquet:"small_key"`
		F      float32 `parquet:"f"`
	}
	path := filepath.Join(t.TempDir(), "k.parquet")
	rows := make([]row, 100)
	for i := range rows {
		rows[i] = row{UserID: int64(i) * 1_000_003, Small: int32(i), F: float32(i)}
	}
	if err := pgo.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, path)
	recs := readShards(t, s, mustPlan(t, s, 1000), sources.ReadOptions{Columns: []string{"small_key", "user_id"}, BatchSize: 30})
	defer releaseAll(recs)
	ids := int64Column(t, recs, "user_id")
	for i, id := range ids {
		if id != int64(i)*1_000_003 {
			t.Fatalf("row %d: %d", i, id)
		}
	}
	if recs[0].Column(0).DataType().ID() != arrow.INT32 || len(ids) != 100 {
		t.Fatalf("small_key is %s, %d rows", recs[0].Column(0).DataType(), len(ids))
	}
}

func TestZeroRowFileAndEmptyDataset(t *testing.T) {
	dir := t.TempDir()
	writePgFile(t, filepath.Join(dir, "empty.parquet"), 0, 0, 10)
	s := mustNew(t, dir)
	if _, err := s.Schema(context.Background()); err != nil {
		t.Fatalf("schema of zero-row file: %v", err)
	}
	plans, err := s.Plan(context.Background(), 100)
	if err != nil || len(plans) != 0 {
		t.Fatalf("plan of zero-row file: %v, %d shards", err, len(plans))
	}
	// A zero-row file beside a real one contributes no shards.
	writePgFile(t, filepath.Join(dir, "full.parquet"), 0, 50, 10)
	plans = mustPlan(t, mustNew(t, dir), 100)
	if len(plans) != 1 || plans[0].Rows != 50 {
		t.Fatalf("plans %+v", plans)
	}
}

func TestSchemaMismatch(t *testing.T) {
	dir := t.TempDir()
	writePgFile(t, filepath.Join(dir, "a.parquet"), 0, 10, 10)
	type other struct {
		Key string  `parquet:"key"`
		ID  float64 `parquet:"id"` // was int64
	}
	if err := pgo.WriteFile(filepath.Join(dir, "b.parquet"), []other{{"x", 1}}); err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, dir)
	for name, f := range map[string]func() error{
		"schema": func() error { _, err := s.Schema(context.Background()); return err },
		"plan":   func() error { _, err := s.Plan(context.Background(), 100); return err },
	} {
		err := f()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		msg := err.Error()
		if !strings.Contains(msg, "a.parquet") || !strings.Contains(msg, "b.parquet") || !strings.Contains(msg, `"`) {
			t.Errorf("%s: %v, want both files and the column named", name, err)
		}
	}
	// Type mismatch on the same column is reported as such.
	dir2 := t.TempDir()
	type v1 struct {
		ID int64 `parquet:"id"`
	}
	type v2 struct {
		ID float64 `parquet:"id"`
	}
	if err := pgo.WriteFile(filepath.Join(dir2, "a.parquet"), []v1{{1}}); err != nil {
		t.Fatal(err)
	}
	if err := pgo.WriteFile(filepath.Join(dir2, "b.parquet"), []v2{{1}}); err != nil {
		t.Fatal(err)
	}
	_, err := mustNew(t, dir2).Schema(context.Background())
	if err == nil || !strings.Contains(err.Error(), `column "id" is int64`) || !strings.Contains(err.Error(), "float64") {
		t.Errorf("type mismatch: %v", err)
	}
}

func TestCorruptAndMissingFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writePgFile(t, good, 0, 2000, 500, pgo.Compression(&pgo.Uncompressed))
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}

	garbage := append([]byte("PAR1"), bytes.Repeat([]byte{0xab}, 200)...)
	garbage = append(garbage, []byte{50, 0, 0, 0}...)
	garbage = append(garbage, []byte("PAR1")...)
	cases := map[string][]byte{
		"garbage.parquet":   garbage,
		"truncated.parquet": data[:len(data)/2],
		"tiny.parquet":      []byte("PAR1"),
		"zero.parquet":      nil,
	}
	for name, content := range cases {
		p := filepath.Join(dir, "bad", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		s := mustNew(t, p)
		_, err := s.Schema(context.Background())
		t.Logf("%s: %v", name, err)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: Schema error %v does not name the file", name, err)
		}
		if _, err := s.Plan(context.Background(), 100); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: Plan error %v does not name the file", name, err)
		}
	}

	// Corrupt data pages with an intact footer: Next fails naming the
	// file and a row group, and never panics.
	s := mustNew(t, good)
	plans := mustPlan(t, s, 2000)
	bad := append([]byte(nil), data...)
	for i := 100; i < len(bad)/2; i += 7 {
		bad[i] ^= 0x5a
	}
	info, err := os.Stat(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(good, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	sawErr := false
	for _, p := range plans {
		r, err := s.Open(context.Background(), p.Plan, sources.ReadOptions{BatchSize: 256})
		if err != nil {
			t.Logf("open: %v", err)
			if !strings.Contains(err.Error(), good) {
				t.Errorf("open error %v does not name the file", err)
			}
			sawErr = true
			continue
		}
		for {
			rec, err := r.Next(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Logf("next: %v", err)
				if !strings.Contains(err.Error(), good) || !strings.Contains(err.Error(), "row group") {
					t.Errorf("read error %v does not name file and row group", err)
				}
				sawErr = true
				break
			}
			rec.Release()
		}
		r.Close()
	}
	if !sawErr {
		t.Error("corrupted pages read without error")
	}

	// A file deleted after planning.
	if err := os.Remove(good); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(context.Background(), plans[0].Plan, sources.ReadOptions{}); err == nil || !strings.Contains(err.Error(), good) {
		t.Errorf("open of deleted file: %v", err)
	}
	if _, err := s.Plan(context.Background(), 100); err == nil || !strings.Contains(err.Error(), good) {
		t.Errorf("plan with deleted file: %v", err)
	}
}

func TestOpenDetectsChangedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.parquet")
	writePgFile(t, path, 0, 100, 50)
	s := mustNew(t, path)
	plans := mustPlan(t, s, 100)
	// Rewrite with different content and a different mtime.
	writePgFile(t, path, 0, 120, 50)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	_, err := s.Open(context.Background(), plans[0].Plan, sources.ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), "changed since") || !strings.Contains(err.Error(), path) {
		t.Fatalf("open of changed file: %v", err)
	}
}

func TestOpenRejectsBadPlans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.parquet")
	writePgFile(t, path, 0, 100, 50)
	s := mustNew(t, path)
	p := mustPlan(t, s, 100)[0]
	var sp shardPlan
	if err := json.Unmarshal(p.Plan, &sp); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(*shardPlan)) json.RawMessage {
		c := sp
		f(&c)
		b, _ := json.Marshal(c)
		return b
	}
	for name, raw := range map[string]json.RawMessage{
		"not json":        json.RawMessage(`{`),
		"unknown field":   json.RawMessage(`{"file":"x","bogus":1}`),
		"no file":         mut(func(c *shardPlan) { c.File = "" }),
		"rg out of range": mut(func(c *shardPlan) { c.FirstRowGroup = 5 }),
		"too many rows":   mut(func(c *shardPlan) { c.Rows = 101 }),
		"offset too big":  mut(func(c *shardPlan) { c.Offset = 60; c.Rows = 50 }),
		"negative":        mut(func(c *shardPlan) { c.Offset = -1 }),
		"zero rows":       mut(func(c *shardPlan) { c.Rows = 0 }),
	} {
		if r, err := s.Open(context.Background(), raw, sources.ReadOptions{}); err == nil {
			r.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
}

func TestContextCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.parquet")
	writePgFile(t, path, 0, 100, 50)
	s := mustNew(t, path)
	p := mustPlan(t, s, 100)[0]
	ctx, cancel := context.WithCancel(context.Background())
	r, err := s.Open(ctx, p.Plan, sources.ReadOptions{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cancel()
	if _, err := r.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
}

func FuzzOpenPlan(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "f.parquet")
	writePgFile(f, path, 0, 300, 100)
	s := mustNew(f, path)
	for _, p := range mustPlan(f, s, 150) {
		f.Add([]byte(p.Plan))
	}
	f.Add([]byte(`{"file":"` + path + `","first_row_group":2,"num_row_groups":1000000,"offset":9223372036854775807,"rows":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, plan []byte) {
		r, err := s.Open(context.Background(), plan, sources.ReadOptions{BatchSize: 64})
		if err != nil {
			return
		}
		defer r.Close()
		for range 10 {
			rec, err := r.Next(context.Background())
			if err != nil {
				return
			}
			rec.Release()
		}
	})
}

func TestArrowStoredDictionaryAndLargeString(t *testing.T) {
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: dt, Nullable: true},
		{Name: "ls", Type: arrow.BinaryTypes.LargeString},
		{Name: "v", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	const n = 1000
	for i := range n {
		if i%10 == 9 {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.BinaryDictionaryBuilder).AppendString("cat-" + itoa(int64(i%13)))
		}
		b.Field(1).(*array.LargeStringBuilder).Append("user-" + itoa(int64(i)))
		b.Field(2).(*array.Float64Builder).Append(float64(i))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "d.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(sc, f, pq.NewWriterProperties(pq.WithMaxRowGroupLength(300)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, path)
	got, err := s.Schema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !arrow.TypeEqual(got.Field(0).Type, arrow.BinaryTypes.String) || !arrow.TypeEqual(got.Field(1).Type, arrow.BinaryTypes.LargeString) {
		t.Fatalf("schema %s", got)
	}
	recs := readShards(t, s, mustPlan(t, s, 500), sources.ReadOptions{Columns: []string{"ls", "k"}, BatchSize: 70})
	defer releaseAll(recs)
	row := 0
	for _, r := range recs {
		ls, k := r.Column(0).(*array.LargeString), r.Column(1).(*array.String)
		for i := range int(r.NumRows()) {
			if ls.Value(i) != "user-"+itoa(int64(row)) {
				t.Fatalf("row %d: ls %q", row, ls.Value(i))
			}
			if k.IsNull(i) != (row%10 == 9) || (!k.IsNull(i) && k.Value(i) != "cat-"+itoa(int64(row%13))) {
				t.Fatalf("row %d: k %q null=%v", row, k.Value(i), k.IsNull(i))
			}
			row++
		}
	}
	if row != n {
		t.Fatalf("read %d rows", row)
	}
}

// TestConcurrentShards reads all shards of one Source from several
// goroutines at once, as a worker with several slots does (run with -race).
func TestConcurrentShards(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		writeArrowFile(t, filepath.Join(dir, "part-"+itoa(int64(i))+".parquet"), int64(i)*900, 900, 200)
	}
	s := mustNew(t, dir)
	plans := mustPlan(t, s, 300)
	var wg sync.WaitGroup
	sums := make([]int64, len(plans))
	errs := make(chan error, len(plans))
	for i, p := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Open(context.Background(), p.Plan, sources.ReadOptions{Columns: []string{"id", "emb"}, BatchSize: 50})
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			for {
				rec, err := r.Next(context.Background())
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				for _, v := range rec.Column(0).(*array.Int64).Int64Values() {
					sums[i] += v
				}
				rec.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total int64
	for _, v := range sums {
		total += v
	}
	if want := int64(2700 * 2699 / 2); total != want {
		t.Fatalf("sum of ids %d, want %d", total, want)
	}
}

// FuzzFileContent feeds mutated Parquet files through the whole path:
// Schema, Plan, Open and Next must return errors, never panic. Seeds carry
// no stored Arrow schema: arrow-go decodes a corrupt ARROW:schema flatbuffer
// with unbounded allocations (a known upstream limitation, not ours to
// bound). testdata/fuzz holds a corrupt page header that used to crash a
// decoder goroutine.
func FuzzFileContent(f *testing.F) {
	dir := f.TempDir()
	for i, write := range []func(string){
		func(p string) { writePgFile(f, p, 0, 40, 16, pgo.Compression(&pgo.Uncompressed)) },
		func(p string) { writePgFile(f, p, 0, 40, 16, pgo.Compression(&pgo.Snappy), pgo.DataPageVersion(2)) },
	} {
		p := filepath.Join(dir, "seed-"+itoa(int64(i))+".parquet")
		write(p)
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// Seeds for the paths arrow-go alone does not take: a logical type
	// newer than it (footer rewrite), Hadoop LZ4 pages, a footer row count
	// of 0, an empty compressed v2 page section (corpus files without a
	// stored Arrow schema).
	newer := filepath.Join(dir, "newer.parquet")
	writePgFile(f, newer, 0, 40, 16, pgo.Compression(&pgo.Uncompressed))
	if err := parquettest.SetUnknownLogicalType(newer, "id", 99); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{newer,
		filepath.Join(corpusDir, "data", "hadoop_lz4_compressed.parquet"),
		filepath.Join(corpusDir, "data", "repeated_no_annotation.parquet"),
		filepath.Join(corpusDir, "data", "datapage_v2_empty_datapage.snappy.parquet"),
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.parquet")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := s.Schema(ctx); err != nil {
			return
		}
		plans, err := s.Plan(ctx, 10)
		if err != nil {
			return
		}
		for _, sp := range plans[:min(len(plans), 20)] {
			r, err := s.Open(ctx, sp.Plan, sources.ReadOptions{BatchSize: 7})
			if err != nil {
				continue
			}
			for {
				rec, err := r.Next(ctx)
				if err != nil {
					break
				}
				rec.Release()
			}
			r.Close()
		}
	})
}
