package runner

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/sinks"
)

func isStringKey(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.STRING_VIEW:
		return true
	}
	return false
}

// keyString renders row r of a key column as text (for rejects and errors).
func keyString(col arrow.Array, r int) string {
	if col.IsNull(r) {
		return ""
	}
	switch c := col.(type) {
	case *array.String:
		return c.Value(r)
	case *array.LargeString:
		return c.Value(r)
	case *array.Binary:
		return string(c.Value(r))
	case *array.LargeBinary:
		return string(c.Value(r))
	case *array.StringView:
		return c.Value(r)
	}
	if v, err := keyInt(col, r); err == nil {
		return strconv.FormatInt(v, 10)
	}
	return col.ValueStr(r)
}

// keyInt reads row r of an integer key column as int64.
func keyInt(col arrow.Array, r int) (int64, error) {
	switch c := col.(type) {
	case *array.Int64:
		return c.Value(r), nil
	case *array.Int32:
		return int64(c.Value(r)), nil
	case *array.Int16:
		return int64(c.Value(r)), nil
	case *array.Int8:
		return int64(c.Value(r)), nil
	case *array.Uint8:
		return int64(c.Value(r)), nil
	case *array.Uint16:
		return int64(c.Value(r)), nil
	case *array.Uint32:
		return int64(c.Value(r)), nil
	case *array.Uint64:
		v := c.Value(r)
		if v > math.MaxInt64 {
			return 0, fmt.Errorf("key %d overflows int64", v)
		}
		return int64(v), nil
	}
	return 0, fmt.Errorf("key column of type %s is not an integer", col.DataType())
}

// constColumns holds the columns that are the same on every row of a run
// (model_version, computed_at, params), built once at batch size and sliced.
type constColumns struct {
	mu           sync.Mutex
	schema       *arrow.Schema
	run          sinks.RunInfo
	modelVersion string
	at           time.Time
	cols         []arrow.Array
	size         int
}

func newConstColumns(schema *arrow.Schema, run sinks.RunInfo, modelVersion string, at time.Time, size int) *constColumns {
	c := &constColumns{schema: schema, run: run, modelVersion: modelVersion, at: at}
	c.build(max(size, 1))
	return c
}

// build (re)creates the columns at length size. Output layout: key,
// outputs…, model_version, computed_at, params…
func (c *constColumns) build(size int) {
	c.release()
	c.cols, c.size = nil, size
	mem := memory.DefaultAllocator
	first := c.schema.FieldIndices(sinks.ColModelVersion)[0]
	for i := first; i < c.schema.NumFields(); i++ {
		f := c.schema.Field(i)
		if f.Name == sinks.ColComputedAt {
			b := array.NewTimestampBuilder(mem, f.Type.(*arrow.TimestampType))
			b.Reserve(size)
			v := arrow.Timestamp(c.at.UTC().UnixMicro())
			for range size {
				b.UnsafeAppend(v)
			}
			c.cols = append(c.cols, b.NewArray())
			b.Release()
			continue
		}
		v := c.modelVersion
		if f.Name != sinks.ColModelVersion {
			v = c.run.Params[f.Name]
		}
		b := array.NewStringBuilder(mem)
		b.ReserveData(size * len(v))
		b.Reserve(size)
		for range size {
			b.Append(v)
		}
		c.cols = append(c.cols, b.NewArray())
		b.Release()
	}
}

// slice returns the constant columns at length n; the caller releases them.
func (c *constColumns) slice(n int) []arrow.Array {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.size {
		c.build(n)
	}
	out := make([]arrow.Array, len(c.cols))
	for i, col := range c.cols {
		out[i] = array.NewSlice(col, 0, int64(n))
	}
	return out
}

func (c *constColumns) release() {
	for _, col := range c.cols {
		col.Release()
	}
	c.cols = nil
}
