package lookup

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestArrowJSONMap renders a live ZipMap output as the Redis sink stores
// it: a JSON object with integer keys quoted and string keys escaped.
func TestArrowJSONMap(t *testing.T) {
	for _, tc := range []struct {
		key  arrow.DataType
		fill func(array.Builder)
		want string
	}{
		{arrow.PrimitiveTypes.Int64, func(b array.Builder) { b.(*array.Int64Builder).AppendValues([]int64{0, 1}, nil) }, `{"0":0.25,"1":0.75}`},
		{arrow.BinaryTypes.String, func(b array.Builder) { b.(*array.StringBuilder).AppendValues([]string{"neg", `p"s`}, nil) }, `{"neg":0.25,"p\"s":0.75}`},
	} {
		mb := array.NewMapBuilder(memory.DefaultAllocator, tc.key, arrow.PrimitiveTypes.Float32, false)
		mb.Append(true)
		tc.fill(mb.KeyBuilder())
		mb.ItemBuilder().(*array.Float32Builder).AppendValues([]float32{0.25, 0.75}, nil)
		a := mb.NewArray()
		got, err := arrowJSON(nil, a, 0)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s keys: %s, %v; want %s", tc.key, got, err, tc.want)
		}
		a.Release()
		mb.Release()
	}
}
