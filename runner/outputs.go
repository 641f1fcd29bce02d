package runner

import (
	"fmt"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// badOutput is a row whose model output cannot be stored: NaN or ±Inf in a
// float output (Postgres and JSON readers would get garbage or an error).
type badOutput struct {
	row    int
	reason string
}

// nonFinite lists the rows of out whose float outputs (columns first to
// last-1, scalars or lists) hold NaN or ±Inf, one entry per row, ascending.
func nonFinite(out arrow.RecordBatch, first, last int) []badOutput {
	var bad []badOutput
	seen := map[int]bool{}
	for c := first; c < last; c++ {
		name := out.ColumnName(c)
		scanFloats(out.Column(c), func(row int, v float64) {
			if !seen[row] {
				seen[row] = true
				bad = append(bad, badOutput{row: row, reason: fmt.Sprintf("model output %s: %v", name, v)})
			}
		})
	}
	slices.SortFunc(bad, func(a, b badOutput) int { return a.row - b.row })
	return bad
}

// scanFloats calls bad for each non-finite value of a float column or a
// list-of-float column, with the row it belongs to.
func scanFloats(col arrow.Array, bad func(row int, v float64)) {
	switch c := col.(type) {
	case *array.Float32:
		for r, v := range c.Float32Values() {
			if f := float64(v); (math.IsNaN(f) || math.IsInf(f, 0)) && c.IsValid(r) {
				bad(r, f)
			}
		}
	case *array.Float64:
		for r, f := range c.Float64Values() {
			if (math.IsNaN(f) || math.IsInf(f, 0)) && c.IsValid(r) {
				bad(r, f)
			}
		}
	case *array.Map: // a ZipMap output: its values, by row
		rowOf := func(i int) int { return listRow(c, i) }
		scanFloats(c.Items(), func(i int, v float64) { bad(rowOf(i), v) })
	case array.ListLike:
		inner := c.ListValues()
		rowOf := func(i int) int { return listRow(c, i) }
		scanFloats(inner, func(i int, v float64) { bad(rowOf(i), v) })
	}
}

// listRow maps an index into a list column's values back to its row.
func listRow(c array.ListLike, i int) int {
	lo, hi := 0, c.Len()-1
	for lo < hi { // the last row whose start offset is <= i
		mid := (lo + hi + 1) / 2
		if start, _ := c.ValueOffsets(mid); int(start) <= i {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
