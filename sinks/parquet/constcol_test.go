package parquet

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

func TestOneValue(t *testing.T) {
	for _, tc := range []struct {
		vals  []string
		nulls []bool
		want  string
		ok    bool
	}{
		{vals: []string{"v1", "v1", "v1"}, want: "v1", ok: true},
		{vals: []string{"", "", ""}, want: "", ok: true},
		{vals: []string{"abab"}, want: "abab", ok: true},
		{vals: []string{"v1", "v2", "v1"}},
		{vals: []string{"ab", "ab", "ba"}},
		{vals: []string{"a", "aa", "a"}},       // same bytes, other lengths
		{vals: []string{"aa", "a", "aa", "a"}}, // "aaaaaa" repeats with any period
		{vals: []string{"v1", "v1"}, nulls: []bool{true, false}},
		{vals: nil},
	} {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		for i, v := range tc.vals {
			if tc.nulls != nil && !tc.nulls[i] {
				b.AppendNull()
				continue
			}
			b.Append(v)
		}
		a := b.NewStringArray()
		got, ok := oneValue(a)
		if ok != tc.ok || got != tc.want {
			t.Errorf("oneValue(%q, nulls %v) = %q, %v; want %q, %v", tc.vals, tc.nulls, got, ok, tc.want, tc.ok)
		}
		// The same values behind an offset (a slice of a longer array).
		b.Append("x")
		for i, v := range tc.vals {
			if tc.nulls != nil && !tc.nulls[i] {
				b.AppendNull()
				continue
			}
			b.Append(v)
		}
		long := b.NewStringArray()
		sl := array.NewSlice(long, 1, int64(1+len(tc.vals))).(*array.String)
		if got, ok := oneValue(sl); ok != tc.ok || got != tc.want {
			t.Errorf("oneValue(slice of %q) = %q, %v; want %q, %v", tc.vals, got, ok, tc.want, tc.ok)
		}
		a.Release()
		long.Release()
		sl.Release()
		b.Release()
	}
}

// constRun is a run whose schema has a key, a score, model_version (one
// value per run), computed_at and a string column "tag" that a test fills
// with one value or several per batch.
func constRun() sinks.RunInfo {
	fields := append([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
	}, jobs.OutputTail()...)
	fields = append(fields, arrow.Field{Name: "tag", Type: arrow.BinaryTypes.String})
	return sinks.RunInfo{Job: testJob, RunID: "run-c1", Version: "c1", Schema: arrow.NewSchema(fields, nil), Key: "id"}
}

// constBatch builds rows [from, to) of constRun: tag(i) gives row i's tag,
// "" for null. The string columns are slices of longer arrays (as the
// runner's constant columns are), so they start at a non-zero offset.
func constBatch(run sinks.RunInfo, from, to int, version string, tag func(int) string) arrow.RecordBatch {
	mem := memory.DefaultAllocator
	n := to - from
	ids := array.NewInt64Builder(mem)
	sc := array.NewFloat32Builder(mem)
	mv := array.NewStringBuilder(mem)
	at := array.NewTimestampBuilder(mem, run.Schema.Field(3).Type.(*arrow.TimestampType))
	tg := array.NewStringBuilder(mem)
	mv.Append("pad")
	tg.Append("pad")
	for i := from; i < to; i++ {
		ids.Append(int64(i))
		sc.Append(float32(i) / 2)
		mv.Append(version)
		at.Append(arrow.Timestamp(1_700_000_000_000_000))
		if v := tag(i); v == "" {
			tg.AppendNull()
		} else {
			tg.Append(v)
		}
	}
	mvLong, tgLong := mv.NewArray(), tg.NewArray()
	cols := []arrow.Array{ids.NewArray(), sc.NewArray(), array.NewSlice(mvLong, 1, int64(n+1)), at.NewArray(), array.NewSlice(tgLong, 1, int64(n+1))}
	mvLong.Release()
	tgLong.Release()
	rec := array.NewRecordBatch(run.Schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	for _, b := range []array.Builder{ids, sc, mv, at, tg} {
		b.Release()
	}
	return rec
}

// TestConstantStringColumns writes batches whose string columns hold one
// value, several, a second value, or nulls, in every order within a column
// chunk and across row groups split inside a batch, and reads every row
// back: the dictionary arrays the sink hands arrow-go for one-value batches
// must give the same file content as the strings themselves.
func TestConstantStringColumns(t *testing.T) {
	one := func(int) string { return "t-one" }
	many := func(i int) string { return fmt.Sprintf("t-%d", i%7) }
	other := func(int) string { return "t-other" }
	withNull := func(i int) string {
		if i%5 == 0 {
			return ""
		}
		return "t-one"
	}
	type step struct {
		rows int
		tag  func(int) string
	}
	for _, tc := range []struct {
		name    string
		rgRows  int64
		steps   []step
		dictTag bool // the tag column went through the one-value path on every batch
	}{
		{"one value", 0, []step{{1000, one}, {1000, one}, {500, one}}, true},
		{"one value, row groups split inside batches", 700, []step{{1000, one}, {1000, one}, {500, one}}, true},
		{"several then one", 0, []step{{1000, many}, {1000, one}}, false},
		{"one, several, one", 0, []step{{1000, one}, {1000, many}, {1000, one}}, false},
		{"one then another", 300, []step{{1000, one}, {1000, other}, {1000, one}}, false},
		{"nulls", 0, []step{{1000, one}, {1000, withNull}, {1000, one}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "out")})
			if tc.rgRows > 0 {
				s.RowGroupRows = tc.rgRows
			}
			run := constRun()
			ctx := context.Background()
			if err := s.Prepare(ctx, run); err != nil {
				t.Fatal(err)
			}
			sw, err := s.Shard(ctx, run, 0)
			if err != nil {
				t.Fatal(err)
			}
			w := sw.(*shardWriter)
			want := map[int64]string{}
			row := 0
			for _, st := range tc.steps {
				rec := constBatch(run, row, row+st.rows, "v-c1", st.tag)
				for i := row; i < row+st.rows; i++ {
					want[int64(i)] = st.tag(i)
				}
				row += st.rows
				if err := w.Write(ctx, rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			if got := !w.consts.dense[1]; got != tc.dictTag {
				t.Errorf("tag column on the one-value path: %v, want %v", got, tc.dictTag)
			}
			if w.consts.dense[0] {
				t.Errorf("model_version (one value on every row) left the one-value path")
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			checkConstFile(t, w.final, run, want, "v-c1")
		})
	}
}

// checkConstFile reads path back through pqarrow and checks every row's
// model_version and tag, the string columns' Arrow type, and that the
// string columns stayed dictionary-encoded.
func checkConstFile(t *testing.T, path string, run sinks.RunInfo, want map[int64]string, version string) {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	for rg := range pf.NumRowGroups() {
		for _, c := range []int{2, 4} {
			cc, err := pf.MetaData().RowGroup(rg).ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if !cc.HasDictionaryPage() {
				t.Errorf("row group %d column %d: no dictionary page (encodings %v)", rg, c, cc.Encodings())
			}
			if c == 2 {
				st, err := cc.Statistics()
				if err != nil || st == nil || !st.HasMinMax() {
					t.Errorf("row group %d model_version: no min/max statistics (%v)", rg, err)
				} else if bs := st.(interface{ Min() pq.ByteArray }); string(bs.Min()) != version {
					t.Errorf("row group %d model_version min = %q, want %q", rg, bs.Min(), version)
				}
			}
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 256}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	if err := sameFields(sc, run.Schema); err != nil {
		t.Fatalf("file schema: %v", err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	seen := 0
	for rr.Next() {
		rec := rr.RecordBatch()
		ids := rec.Column(0).(*array.Int64)
		mv := rec.Column(2).(*array.String)
		tg := rec.Column(4).(*array.String)
		for i := range int(rec.NumRows()) {
			id := ids.Value(i)
			if mv.Value(i) != version {
				t.Fatalf("row %d model_version %q, want %q", id, mv.Value(i), version)
			}
			got := ""
			if tg.IsValid(i) {
				got = tg.Value(i)
			}
			if got != want[id] {
				t.Fatalf("row %d tag %q, want %q", id, got, want[id])
			}
			seen++
		}
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Fatalf("read %d rows, want %d", seen, len(want))
	}
}
