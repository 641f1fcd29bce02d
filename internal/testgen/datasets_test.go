package testgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
)

// readBack reads every row of a file with arrow-go's reader (a different
// library from the parquet-go writer) and checks it against d.Row.
func readBack(t *testing.T, path string, d Dataset, first, n int64) {
	t.Helper()
	d = d.Defaults()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer pf.Close()
	if got := pf.NumRows(); got != n {
		t.Fatalf("%s: %d rows, want %d", path, got, n)
	}
	wantGroups := int((n + d.RowsPerGroup - 1) / d.RowsPerGroup)
	if got := pf.NumRowGroups(); got != wantGroups {
		t.Errorf("%s: %d row groups, want %d", path, got, wantGroups)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 333}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	key := first
	for {
		rec, err := rr.Read()
		if errors.Is(err, io.EOF) || (err == nil && rec == nil) {
			break
		}
		if err != nil {
			t.Fatalf("%s: read: %v", path, err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if msg := checkRow(rec, i, d, d.Row(key)); msg != "" {
				t.Fatalf("%s key %d: %s", path, key, msg)
			}
			key++
		}
	}
	if key != first+n {
		t.Fatalf("%s: read %d rows, want %d", path, key-first, n)
	}
}

func column(rec arrow.RecordBatch, name string) arrow.Array {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		return nil
	}
	return rec.Column(idx[0])
}

func sameFloat(got float64, want float32) bool {
	if math.IsNaN(float64(want)) {
		return math.IsNaN(got)
	}
	return got == float64(want)
}

func checkRow(rec arrow.RecordBatch, i int, d Dataset, want Row) string {
	switch k := column(rec, KeyColumn).(type) {
	case *array.Int64:
		if d.StringKeys || k.Value(i) != want.Key {
			return fmt.Sprintf("int key %d", k.Value(i))
		}
	case *array.String:
		if !d.StringKeys || k.Value(i) != KeyString(want.Key) {
			return fmt.Sprintf("string key %q", k.Value(i))
		}
	default:
		return fmt.Sprintf("key column type %T", k)
	}
	null := func(j int) bool { return want.Bad == BadNull && want.BadColumn == j }
	if d.hasColumns() {
		for j, f := range want.Features {
			c := column(rec, FeatureColumn(j))
			if c == nil {
				return "missing column " + FeatureColumn(j)
			}
			if c.IsNull(i) != null(j) {
				return fmt.Sprintf("%s null=%v", FeatureColumn(j), c.IsNull(i))
			}
			if null(j) {
				continue
			}
			var got float64
			switch c := c.(type) {
			case *array.Float32:
				got = float64(c.Value(i))
			case *array.Float64:
				got = c.Value(i)
			case *array.Int32:
				got = float64(c.Value(i))
			}
			if d.columnKind(j) != c.DataType().ID() {
				return fmt.Sprintf("%s type %s", FeatureColumn(j), c.DataType())
			}
			if !sameFloat(got, f) {
				return fmt.Sprintf("%s = %v, want %v", FeatureColumn(j), got, f)
			}
		}
	}
	if d.hasList() {
		l, ok := column(rec, ListColumn).(array.ListLike)
		if !ok {
			return fmt.Sprintf("list column type %T", column(rec, ListColumn))
		}
		if d.Writer == WriterArrow && l.DataType().ID() != arrow.FIXED_SIZE_LIST {
			return "arrow writer list is " + l.DataType().String()
		}
		start, end := l.ValueOffsets(i)
		if int(end-start) != d.Dim {
			return fmt.Sprintf("list length %d", end-start)
		}
		vals := l.ListValues().(*array.Float32)
		for j, f := range want.Features {
			if vals.IsNull(int(start)+j) != null(j) {
				return fmt.Sprintf("list[%d] null=%v", j, vals.IsNull(int(start)+j))
			}
			if !null(j) && !sameFloat(float64(vals.Value(int(start)+j)), f) {
				return fmt.Sprintf("list[%d] = %v, want %v", j, vals.Value(int(start)+j), f)
			}
		}
	}
	return ""
}

func TestDatasetVariantsReadBack(t *testing.T) {
	base := Dataset{Seed: 9, RowsPerFile: 2500, RowsPerGroup: 1000, BadFraction: 0.05}
	var cases []Dataset
	for _, w := range []Writer{WriterParquetGo, WriterArrow} {
		for _, c := range []Codec{CodecNone, CodecSnappy, CodecZstd, CodecGzip} {
			d := base
			d.Writer, d.Codec = w, c
			cases = append(cases, d)
		}
		for _, v := range []struct {
			layout        Layout
			str, mix, dic bool
			v2            bool
			dim           int
		}{
			{LayoutColumns, true, true, false, true, 16},
			{LayoutList, false, false, true, false, 32},
			{LayoutBoth, true, false, true, true, 32},
			{LayoutBoth, false, true, false, false, 16},
		} {
			d := base
			d.Writer, d.Layout, d.StringKeys, d.Mixed, d.Dictionary, d.DataPageV2, d.Dim =
				w, v.layout, v.str, v.mix, v.dic, v.v2, v.dim
			cases = append(cases, d)
		}
	}
	for i, d := range cases {
		name := fmt.Sprintf("%d-%s-%s-%s-str%v-mix%v-dict%v-v2%v-dim%d", i, d.Writer, d.Codec, d.Layout,
			d.StringKeys, d.Mixed, d.Dictionary, d.DataPageV2, d.Dim)
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := WriteDataset(dir, d)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Files) != 1 || res.Rows != 2500 {
				t.Fatalf("result %+v", res)
			}
			var bad int64
			for k := int64(0); k < 2500; k++ {
				if d.Row(k).Bad != BadNone {
					bad++
				}
			}
			if res.BadRows != bad || bad < 50 || bad > 250 {
				t.Errorf("bad rows: result %d, Row says %d, want about 125", res.BadRows, bad)
			}
			readBack(t, res.Files[0], d, 0, 2500)
			checkParquetGoReads(t, res.Files[0], 2500)
		})
	}
}

// checkParquetGoReads opens the file with parquet-go too: every file must
// be readable by both libraries.
func checkParquetGoReads(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("parquet-go open %s: %v", path, err)
	}
	if pf.NumRows() != n {
		t.Fatalf("parquet-go: %d rows, want %d", pf.NumRows(), n)
	}
	rows := make([]parquet.Row, 100)
	var total int64
	for _, rg := range pf.RowGroups() {
		r := rg.Rows()
		for {
			k, err := r.ReadRows(rows)
			total += int64(k)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("parquet-go read %s: %v", path, err)
			}
		}
		r.Close()
	}
	if total != n {
		t.Fatalf("parquet-go read %d rows, want %d", total, n)
	}
}

func TestDatasetPartitions(t *testing.T) {
	dir := t.TempDir()
	d := Dataset{Seed: 3, Dates: []string{"2026-11-01", "2026-11-02"}, FilesPerDate: 3, RowsPerFile: 100, Disjoint: true}
	res, err := WriteDataset(dir, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 6 || res.Rows != 600 {
		t.Fatalf("result %+v", res)
	}
	want := filepath.Join(dir, "dt=2026-11-02", "part-00002.parquet")
	if res.Files[5] != want {
		t.Fatalf("last file %s, want %s", res.Files[5], want)
	}
	first, n := d.Keys(1, 2)
	if first != 500 || n != 100 {
		t.Fatalf("keys of date 1 file 2 = %d+%d, want 500+100", first, n)
	}
	readBack(t, want, d, first, n)
	same := d
	same.Disjoint = false
	if first, _ := same.Keys(1, 2); first != 200 {
		t.Fatalf("non-disjoint keys start at %d, want 200", first)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*", "*.tmp"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func TestFeaturesDeterministic(t *testing.T) {
	a, b := Features(1, 42, 16), Features(1, 42, 16)
	for i := range a {
		if a[i] != b[i] || a[i] < -1 || a[i] >= 1 {
			t.Fatalf("feature %d: %v vs %v", i, a[i], b[i])
		}
	}
	c := Features(2, 42, 16)
	if a[0] == c[0] && a[1] == c[1] {
		t.Fatal("features do not depend on the seed")
	}
}

func TestEmptyAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	for _, w := range []Writer{WriterParquetGo, WriterArrow} {
		p := filepath.Join(dir, string(w)+"-empty.parquet")
		if err := WriteEmpty(p, Dataset{Writer: w}); err != nil {
			t.Fatal(err)
		}
		pf, err := file.OpenParquetFile(p, false)
		if err != nil {
			t.Fatalf("empty %s: %v", w, err)
		}
		if pf.NumRows() != 0 || pf.MetaData().Schema.NumColumns() == 0 {
			t.Errorf("empty %s: %d rows, %d columns", w, pf.NumRows(), pf.MetaData().Schema.NumColumns())
		}
		pf.Close()
	}
	for _, c := range []Corruption{CorruptTruncated, CorruptGarbage} {
		p := filepath.Join(dir, fmt.Sprintf("corrupt-%d.parquet", c))
		if err := WriteCorrupt(p, c); err != nil {
			t.Fatal(err)
		}
		if pf, err := file.OpenParquetFile(p, false); err == nil {
			pf.Close()
			t.Errorf("corruption %d: arrow-go opened it", c)
		}
		f, _ := os.Open(p)
		st, _ := f.Stat()
		if _, err := parquet.OpenFile(f, st.Size()); err == nil {
			t.Errorf("corruption %d: parquet-go opened it", c)
		}
		f.Close()
	}
}

func TestDatasetRejectsBadOptions(t *testing.T) {
	for _, d := range []Dataset{
		{Codec: "lzma"}, {Writer: "duckdb"}, {Layout: "rows"}, {BadFraction: 2}, {Dim: 1},
	} {
		if _, err := WriteDataset(t.TempDir(), d); err == nil {
			t.Errorf("%+v: want error", d)
		}
	}
}
