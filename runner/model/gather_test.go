package model

import (
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestAllWithin(t *testing.T) {
	f32 := float32(math.MaxFloat32)
	nan32, inf32 := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		src  []float32
		want bool
	}{
		{"empty", nil, true},
		{"clean", []float32{0, -1.5, 3e38, -3e38, float32(math.Copysign(0, -1)), 1e-45}, true},
		{"max", []float32{f32, -f32}, true},
		{"NaN", []float32{1, nan32, 2}, false},
		{"-NaN", []float32{1, -nan32}, false},
		{"+Inf", []float32{inf32}, false},
		{"-Inf", []float32{1, 2, -inf32}, false},
	} {
		if got := allWithin(tc.src, f32); got != tc.want {
			t.Errorf("float32 %s: allWithin = %v, want %v", tc.name, got, tc.want)
		}
	}
	lim := float64(math.MaxFloat32) // a float64 column for a float32 input
	for _, tc := range []struct {
		name string
		src  []float64
		want bool
	}{
		{"clean", []float64{0, -1, lim, -lim}, true},
		{"above float32", []float64{1, lim * 1.0000001}, false},
		{"below -float32", []float64{-lim * 2}, false},
		{"NaN", []float64{math.NaN()}, false},
		{"Inf", []float64{math.Inf(-1)}, false},
	} {
		if got := allWithin(tc.src, lim); got != tc.want {
			t.Errorf("float64 %s: allWithin = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFillColumnBlocks: the blocked transpose writes every kept row of
// every column, for row counts that are not a multiple of the block, with
// every row kept and with some rejected.
func TestFillColumnBlocks(t *testing.T) {
	const k = 3
	for _, n := range []int{1, gatherBlock - 1, gatherBlock, 3*gatherBlock + 17} {
		cols := make([]arrow.Array, k)
		for j := range cols {
			b := array.NewFloat32Builder(memory.DefaultAllocator)
			for r := range n {
				b.Append(float32(r*10 + j))
			}
			cols[j] = b.NewArray()
			b.Release()
		}
		for _, keepAll := range []bool{true, false} {
			var rows []int
			for r := range n {
				if keepAll || r%3 != 1 {
					rows = append(rows, r)
				}
			}
			dst := make([]float32, len(rows)*k)
			for lo := 0; lo < len(rows); lo += gatherBlock {
				blk := span{lo: lo, hi: min(lo+gatherBlock, len(rows)), ident: len(rows) == n}
				for j, c := range cols {
					fillColumn(dst, k, j, c, rows, blk)
				}
			}
			for i, r := range rows {
				for j := range k {
					if got, want := dst[i*k+j], float32(r*10+j); got != want {
						t.Fatalf("n %d keepAll %v: dst[%d][%d] = %v, want %v", n, keepAll, i, j, got, want)
					}
				}
			}
		}
		for _, c := range cols {
			c.Release()
		}
	}
}

// TestTransposeFloat32s: the float32 fast path writes the same tensor as
// the general per-column gather, for column counts around its four-column
// groups and row counts around its blocks, and declines a column of
// another type without writing.
func TestTransposeFloat32s(t *testing.T) {
	for _, k := range []int{1, 3, 4, 5, 16, 17} {
		for _, n := range []int{1, gatherBlock - 1, gatherBlock, 3*gatherBlock + 17} {
			cols := make([]colRef, k)
			rows := make([]int, n)
			for r := range rows {
				rows[r] = r
			}
			for j := range cols {
				b := array.NewFloat32Builder(memory.DefaultAllocator)
				for r := range n {
					b.Append(float32(r*100 + j))
				}
				cols[j] = colRef{arr: b.NewArray()}
				b.Release()
			}
			want := make([]float32, n*k)
			for lo := 0; lo < n; lo += gatherBlock {
				blk := span{lo: lo, hi: min(lo+gatherBlock, n), ident: true}
				for j, c := range cols {
					fillColumn(want, k, j, c.arr, rows, blk)
				}
			}
			got := make([]float32, n*k)
			if !transposeFloat32s(got, k, cols, n) {
				t.Fatalf("k %d n %d: declined float32 columns", k, n)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("k %d n %d: dst[%d] = %v, want %v", k, n, i, got[i], want[i])
				}
			}
			for _, c := range cols {
				c.arr.Release()
			}
		}
	}
	b := array.NewFloat64Builder(memory.DefaultAllocator)
	b.AppendValues([]float64{1, 2}, nil)
	f64 := b.NewArray()
	b.Release()
	defer f64.Release()
	dst := []float32{-1, -1}
	if transposeFloat32s(dst, 1, []colRef{{arr: f64}}, 2) || dst[0] != -1 || dst[1] != -1 {
		t.Errorf("a float64 column: taken, or dst written (%v)", dst)
	}
}
