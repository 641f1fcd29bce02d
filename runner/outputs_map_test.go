package runner

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestNonFiniteMap finds a NaN probability inside a ZipMap output's map and
// rejects its row; dropping it keeps the other rows' maps intact.
func TestNonFiniteMap(t *testing.T) {
	mb := array.NewMapBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float32, false)
	kb, ib := mb.KeyBuilder().(*array.Int64Builder), mb.ItemBuilder().(*array.Float32Builder)
	for _, row := range [][]float32{{0.5, 0.5}, {0.25, float32(math.NaN())}, {0.9, 0.1}} {
		mb.Append(true)
		kb.AppendValues([]int64{0, 1}, nil)
		ib.AppendValues(row, nil)
	}
	m := mb.NewArray()
	mb.Release()
	defer m.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "proba", Type: m.DataType()}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{m}, 3)
	defer rec.Release()
	bad := nonFinite(rec, 0, 1)
	if len(bad) != 1 || bad[0].row != 1 || !strings.Contains(bad[0].reason, "proba: NaN") {
		t.Fatalf("nonFinite = %+v, want row 1 (proba NaN)", bad)
	}
	kept, _, err := dropRows(rec, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release()
	km := kept.Column(0).(*array.Map)
	if kept.NumRows() != 2 || km.Items().(*array.Float32).Value(2) != 0.9 || len(nonFinite(kept, 0, 1)) != 0 {
		t.Fatalf("dropRows kept %v", km)
	}
}
