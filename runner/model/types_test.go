package model

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/jobs"
)

// viaParquet writes rec to a Parquet file and reads it back as one record,
// so that column types are what a Parquet source really yields.
func viaParquet(t *testing.T, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	path := filepath.Join(t.TempDir(), "part-0.parquet")
	tbl := array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{rec})
	defer tbl.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	err = pqarrow.WriteTable(tbl, f, 1<<20, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 20}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	if !rr.Next() {
		t.Fatalf("read back %s: no record (%v)", path, rr.Err())
	}
	out := rr.RecordBatch()
	out.Retain()
	t.Cleanup(out.Release)
	return out
}

// mixedRecord holds n rows of 16 features for the ranker: f0..f12 float32,
// f13 bool, f14 decimal128(12,3), f15 decimal256(40,2). x gets the values
// the model must see; row nullRow has a null decimal.
func mixedRecord(n, nullRow int) (arrow.RecordBatch, []float32) {
	const k = 16
	x := features(n, k, false, 3)
	fields := []arrow.Field{{Name: "user_id", Type: arrow.PrimitiveTypes.Int64}}
	for j := range 13 {
		fields = append(fields, arrow.Field{Name: columnNames(k)[j], Type: arrow.PrimitiveTypes.Float32})
	}
	fields = append(fields,
		arrow.Field{Name: "f13", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		arrow.Field{Name: "f14", Type: &arrow.Decimal128Type{Precision: 12, Scale: 3}, Nullable: true},
		arrow.Field{Name: "f15", Type: &arrow.Decimal256Type{Precision: 40, Scale: 2}, Nullable: true})
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for r := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(r))
		for j := range 13 {
			b.Field(j + 1).(*array.Float32Builder).Append(x[r*k+j])
		}
		on := r%3 == 0
		b.Field(14).(*array.BooleanBuilder).Append(on)
		x[r*k+13] = 0
		if on {
			x[r*k+13] = 1
		}
		// Decimals hold exactly what x says, to their scale.
		d14 := int64(x[r*k+14] * 1000)
		x[r*k+14] = float32(float64(d14) / 1000)
		d15 := int64(x[r*k+15] * 100)
		x[r*k+15] = float32(float64(d15) / 100)
		if r == nullRow {
			b.Field(15).AppendNull()
		} else {
			b.Field(15).(*array.Decimal128Builder).Append(decimal128.FromI64(d14))
		}
		b.Field(16).(*array.Decimal256Builder).Append(decimal256.FromI64(d15))
	}
	return b.NewRecordBatch(), x
}

func TestBooleanAndDecimalColumns(t *testing.T) {
	const n, nullRow = 40, 7
	rec, x := mixedRecord(n, nullRow)
	defer rec.Release()
	rec = viaParquet(t, rec)
	for i, want := range []arrow.Type{arrow.BOOL, arrow.DECIMAL128, arrow.DECIMAL256} {
		if got := rec.Schema().Field(14 + i).Type.ID(); got != want {
			t.Fatalf("Parquet read back %s as %s, want %s", rec.Schema().Field(14+i).Name, got, want)
		}
	}
	m := loadModel(t, specFor(t, "ranker"))
	if err := m.CheckSchema(rec.Schema()); err != nil {
		t.Fatalf("CheckSchema: %v", err)
	}
	b, out := infer(t, m, rec)
	if len(b.Rejects) != 1 || b.Rejects[0].Row != nullRow || b.Rejects[0].Reason != "column f14: null" {
		t.Fatalf("rejects %+v, want row %d: column f14: null", b.Rejects, nullRow)
	}
	rows := append(identity(nullRow), identity(n)[nullRow+1:]...)
	checkAgainstReference(t, testModel(t, "ranker"), x, 16, rows, out)
}

// Booleans feed integer inputs as 0/1; decimals (like floats) do not.
func TestBooleanIntoIntegerInput(t *testing.T) {
	spec := specFor(t, "typed_int64")
	spec.Inputs = map[string]jobs.InputSpec{"features": {Columns: []string{"f0", "f13", "f13", "f1"}}}
	m := loadModel(t, spec)
	rec := columnsRecord(features(5, 2, true, 1), 5, 2, arrow.PrimitiveTypes.Int64, nil)
	defer rec.Release()
	bools := array.NewBooleanBuilder(memory.DefaultAllocator)
	defer bools.Release()
	bools.AppendValues([]bool{true, false, true, true, false}, nil)
	col := bools.NewArray()
	defer col.Release()
	rec2 := array.NewRecordBatch(
		arrow.NewSchema(append(rec.Schema().Fields(), arrow.Field{Name: "f13", Type: arrow.FixedWidthTypes.Boolean}), nil),
		append(rec.Columns(), col), rec.NumRows())
	defer rec2.Release()
	b, err := m.Encode(rec2)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	defer b.Release()
	got := b.bufs.data[0].([]int64)
	f0, f1 := rec.Column(1).(*array.Int64), rec.Column(2).(*array.Int64)
	for r := range 5 {
		on := int64(0)
		if col.(*array.Boolean).Value(r) {
			on = 1
		}
		want := []int64{f0.Value(r), on, on, f1.Value(r)}
		if g := got[r*4 : r*4+4]; !equalInts(g, want) {
			t.Errorf("row %d: tensor %v, want %v", r, g, want)
		}
	}
	dec := arrow.NewSchema([]arrow.Field{{Name: "f0", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}},
		{Name: "f1", Type: arrow.PrimitiveTypes.Int64}, {Name: "f13", Type: arrow.FixedWidthTypes.Boolean}}, nil)
	want := `model.inputs.features.columns[0]: column "f0" is decimal(10, 2) but input "features" is int64: floating point and decimal columns cannot feed integer inputs`
	if err := m.CheckSchema(dec); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckSchema = %v, want %q", err, want)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// One column may feed an input twice (duplicated features): the tensor
// holds it in both places.
func TestColumnUsedTwice(t *testing.T) {
	const n, k = 25, 16
	x := features(n, k, false, 11)
	for r := range n {
		x[r*k+15] = x[r*k+2] // the model's f15 is the source's f2 again
	}
	// The source has f0..f14 only.
	x15 := make([]float32, 0, n*15)
	for r := range n {
		x15 = append(x15, x[r*k:r*k+15]...)
	}
	src := columnsRecord(x15, n, 15, arrow.PrimitiveTypes.Float32, nil)
	defer src.Release()
	rec := viaParquet(t, src)
	spec := specFor(t, "ranker")
	spec.Inputs = map[string]jobs.InputSpec{"features": {Columns: append(columnNames(15), "f2")}}
	m := loadModel(t, spec)
	if err := m.CheckSchema(rec.Schema()); err != nil {
		t.Fatalf("CheckSchema: %v", err)
	}
	if got := m.InputColumns(); len(got) != 15 {
		t.Errorf("InputColumns = %v, want each column once", got)
	}
	_, out := infer(t, m, rec)
	checkAgainstReference(t, testModel(t, "ranker"), x, k, identity(n), out)
}

// A list of booleans or decimals feeds a `column:` input too.
func TestBooleanAndDecimalLists(t *testing.T) {
	const n, k = 6, 16
	for _, elem := range []arrow.DataType{arrow.FixedWidthTypes.Boolean, &arrow.Decimal128Type{Precision: 9, Scale: 1}} {
		x := make([]float32, n*k)
		lb := array.NewListBuilder(memory.DefaultAllocator, elem)
		for r := range n {
			lb.Append(true)
			for j := range k {
				v := (r + j) % 2
				x[r*k+j] = float32(v)
				switch vb := lb.ValueBuilder().(type) {
				case *array.BooleanBuilder:
					vb.Append(v == 1)
				case *array.Decimal128Builder:
					vb.Append(decimal128.FromI64(int64(v * 10))) // scale 1: v.0
				}
			}
		}
		col := lb.NewArray()
		lb.Release()
		schema := arrow.NewSchema([]arrow.Field{{Name: "emb", Type: col.DataType()}}, nil)
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, n)
		col.Release()
		spec := specFor(t, "ranker")
		spec.Inputs = map[string]jobs.InputSpec{"features": {Column: "emb"}}
		m := loadModel(t, spec)
		if err := m.CheckSchema(schema); err != nil {
			t.Fatalf("%s: CheckSchema: %v", elem, err)
		}
		_, out := infer(t, m, viaParquet(t, rec))
		rec.Release()
		checkAgainstReference(t, testModel(t, "ranker"), x, k, identity(n), out)
	}
}

// CheckSchema reports every bad column in one error, each with its path.
func TestCheckSchemaListsEveryProblem(t *testing.T) {
	spec := specFor(t, "typed_int64")
	spec.Inputs = map[string]jobs.InputSpec{"features": {Columns: []string{"f0", "nope", "name", "f3"}}}
	m := loadModel(t, spec)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "f0", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "f3", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	err := m.CheckSchema(schema)
	if err == nil {
		t.Fatal("CheckSchema accepted three bad columns")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Fatalf("want 3 problems, got %v", err)
	}
	for _, want := range []string{
		`job.yaml: model.inputs.features.columns[1]: column "nope" not in source schema`,
		`job.yaml: model.inputs.features.columns[2]: column "name" is utf8, want numbers`,
		`job.yaml: model.inputs.features.columns[3]: column "f3" is float64 but input "features" is int64`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\nlacks %q", err, want)
		}
	}
}
