package model

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// asNumbers returns arr in a form the scanners and gatherers read: arr
// itself for integer and floating point arrays; booleans become uint8 0/1
// and decimals float64 (value × 10^-scale), nulls kept. When converted is
// true the caller releases out.
func asNumbers(arr arrow.Array) (out arrow.Array, converted bool) {
	switch a := arr.(type) {
	case *array.Boolean:
		b := array.NewUint8Builder(memory.DefaultAllocator)
		defer b.Release()
		b.Reserve(a.Len())
		for i := range a.Len() {
			switch {
			case a.IsNull(i):
				b.UnsafeAppendBoolToBitmap(false)
			case a.Value(i):
				b.UnsafeAppend(1)
			default:
				b.UnsafeAppend(0)
			}
		}
		return b.NewArray(), true
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		return decimalsToFloat(a, func(i int) float64 { return a.Value(i).ToFloat64(scale) }), true
	case *array.Decimal256:
		scale := a.DataType().(*arrow.Decimal256Type).Scale
		return decimalsToFloat(a, func(i int) float64 { return a.Value(i).ToFloat64(scale) }), true
	}
	return arr, false
}

func decimalsToFloat(a arrow.Array, value func(i int) float64) arrow.Array {
	b := array.NewFloat64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(a.Len())
	for i := range a.Len() {
		if a.IsNull(i) {
			b.UnsafeAppendBoolToBitmap(false)
			continue
		}
		b.UnsafeAppend(value(i))
	}
	return b.NewArray()
}
