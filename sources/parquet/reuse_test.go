package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/sources"
)

// TestReuseNumericColumns: with ReadOptions.Reuse, a batch's numeric
// columns are decoded into the memory the previous batch's release gave
// back (the same buffers, not fresh heap), every value is read back right,
// and a string column is never decoded into reused memory.
func TestReuseNumericColumns(t *testing.T) {
	const rows, batch = 20_000, 8192
	path := filepath.Join(t.TempDir(), "d", "part-0.parquet")
	writeArrowFile(t, path, 0, rows, rows)
	src := mustNew(t, filepath.Dir(path))
	plans := mustPlan(t, src, rows)
	ctx := context.Background()
	r, err := src.Open(ctx, plans[0].Plan, sources.ReadOptions{Columns: []string{"id", "name", "score"}, BatchSize: batch, Reuse: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	valuesAt := func(a arrow.Array) uintptr {
		return uintptr(unsafe.Pointer(unsafe.SliceData(a.Data().Buffers()[1].Bytes())))
	}
	var prev map[uintptr]bool
	reused := 0
	for n, row := 0, int64(0); ; n++ {
		rec, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids, names, scores := rec.Column(0).(*array.Int64), rec.Column(1).(*array.String), rec.Column(2).(*array.Float32)
		for k := range int(rec.NumRows()) {
			i := row + int64(k)
			if ids.Value(k) != i {
				t.Fatalf("row %d: id %d", i, ids.Value(k))
			}
			if want := fmt.Sprintf("name-%d", i%11); i%7 != 3 && names.Value(k) != want {
				t.Fatalf("row %d: name %q, want %q", i, names.Value(k), want)
			}
			if i%4 != 1 && scores.Value(k) != float32(i)*1.5 {
				t.Fatalf("row %d: score %v", i, scores.Value(k))
			}
		}
		cur := map[uintptr]bool{valuesAt(ids): true, valuesAt(scores): true}
		if n == 1 {
			for a := range cur {
				if prev[a] {
					reused++
				}
			}
			if prev[valuesAt(names)] || prev[uintptr(unsafe.Pointer(unsafe.SliceData(names.ValueBytes())))] {
				t.Error("a string column was decoded into a released numeric buffer")
			}
		}
		prev = cur
		row += rec.NumRows()
		rec.Release()
	}
	if reused != 2 {
		t.Errorf("%d of the second batch's 2 numeric columns reused the first batch's released buffers", reused)
	}
}
