package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// writeOutput writes rows (key, score, items, a string column) as one
// Parquet file of a new output directory; shift moves every score, swap
// exchanges the first two items of row swapRow.
func writeOutput(t *testing.T, n int, shift float32, swapRow int) string {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
		{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "model_version", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(n - i)) // another order than the key's
		b.Field(1).(*array.Float32Builder).Append(float32(i)/10 + shift)
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		items := []int64{int64(i), int64(i + 1)}
		if i == swapRow {
			items[0], items[1] = items[1], items[0]
		}
		lb.ValueBuilder().(*array.Int64Builder).AppendValues(items, nil)
		b.Field(3).(*array.StringBuilder).Append("v" + string(rune('a'+int(shift*1000)%26)))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "part-0.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	err = pqarrow.WriteTable(tbl, f, 1<<20, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCompareOutputs: floats are compared row by row joined on the key,
// strings ignored, integer lists that differ counted (ties), and outputs
// of different rows refused.
func TestCompareOutputs(t *testing.T) {
	ctx := context.Background()
	a := writeOutput(t, 50, 0, -1)
	b := writeOutput(t, 50, 0.002, 7)
	r, err := compareOutputs(ctx, a, b, "user_id")
	if err != nil {
		t.Fatal(err)
	}
	if r.Rows != 50 || math.Abs(r.MaxAbs-0.002) > 1e-6 || r.IntRowsDiffer != 1 {
		t.Fatalf("result %+v, want 50 rows, max |Δ| 0.002, 1 row with other integers", r)
	}
	if r, err := compareOutputs(ctx, a, a, "user_id"); err != nil || r.MaxAbs != 0 || r.IntRowsDiffer != 0 {
		t.Fatalf("an output against itself: %+v, %v", r, err)
	}
	if _, err := compareOutputs(ctx, a, writeOutput(t, 49, 0, -1), "user_id"); err == nil || !strings.Contains(err.Error(), "50 rows") {
		t.Fatalf("different row counts: %v", err)
	}
	if _, err := compareOutputs(ctx, a, b, "nope"); err == nil || !strings.Contains(err.Error(), `no key column "nope"`) {
		t.Fatalf("missing key: %v", err)
	}
}
