package model

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	ort "github.com/yalue/onnxruntime_go"
)

// sklearn's default ONNX export of a classifier (skl2onnx with zipmap=True)
// ends in a ZipMap node: its `output_probability` is a
// sequence<map<int64|string, float>>, one map per row from class label to
// probability. precog stores it as an Arrow map<K,V> field, which every sink
// writes as a map: a JSON object in Redis, jsonb in Postgres and a Parquet
// MAP column.

// zipMapOutput recognises a sequence<map<K,V>> output whose keys and values
// precog stores; ok is false for every other type.
func zipMapOutput(t TensorInfo, fieldName string) (*output, bool) {
	inner, ok := strings.CutPrefix(t.Type, "sequence<map<")
	if !ok {
		return nil, false
	}
	inner, ok = strings.CutSuffix(inner, ">>")
	if !ok {
		return nil, false
	}
	key, val, ok := strings.Cut(inner, ",")
	if !ok || (key != "int64" && key != "string") {
		return nil, false
	}
	kind, ok := kindOf(val)
	if !ok || kind == kindString {
		return nil, false
	}
	return &output{name: t.Name, field: fieldName, kind: kind, width: -1, zipKey: key}, true
}

// mapType is the Arrow type of a ZipMap output's field.
func (o *output) mapType() arrow.DataType {
	var key arrow.DataType = arrow.PrimitiveTypes.Int64
	if o.zipKey == "string" {
		key = arrow.BinaryTypes.String
	}
	return arrow.MapOf(key, o.kind.arrowType())
}

// mapCollector gathers a sequence<map<K,V>> output into an Arrow map column,
// keeping each row's key order as the runtime returns it (ZipMap's class
// order).
type mapCollector struct {
	o   *output
	bld *array.MapBuilder
}

func newMapCollector(o *output) *mapCollector {
	mt := o.mapType().(*arrow.MapType)
	return &mapCollector{o: o, bld: array.NewMapBuilderWithType(memory.DefaultAllocator, mt)}
}

func (c *mapCollector) take(v ort.Value, runRows, keep int, _ bool) error {
	seq, ok := v.(*ort.Sequence)
	if !ok {
		return fmt.Errorf("got %T, want a sequence of maps", v)
	}
	maps, err := seq.GetValues()
	if err != nil {
		return err
	}
	if len(maps) != runRows {
		return fmt.Errorf("sequence of %d maps for %d input rows", len(maps), runRows)
	}
	for r, mv := range maps[:keep] {
		m, ok := mv.(*ort.Map)
		if !ok {
			return fmt.Errorf("row %d: got %T, want a map", r, mv)
		}
		keys, vals, err := m.GetKeysAndValues()
		if err != nil {
			return fmt.Errorf("row %d: %w", r, err)
		}
		c.bld.Append(true)
		nk, err := c.appendKeys(keys)
		if err != nil {
			return fmt.Errorf("row %d: keys: %w", r, err)
		}
		nv, err := c.appendValues(vals)
		if err != nil {
			return fmt.Errorf("row %d: values: %w", r, err)
		}
		if nk != nv {
			return fmt.Errorf("row %d: %d keys but %d values", r, nk, nv)
		}
	}
	return nil
}

func (c *mapCollector) appendKeys(v ort.Value) (int, error) {
	switch k := v.(type) {
	case *ort.Tensor[int64]:
		b, ok := c.bld.KeyBuilder().(*array.Int64Builder)
		if !ok {
			return 0, fmt.Errorf("int64 keys, want %s", c.o.zipKey)
		}
		d := k.GetData()
		b.AppendValues(d, nil)
		return len(d), nil
	case *ort.StringTensor:
		b, ok := c.bld.KeyBuilder().(*array.StringBuilder)
		if !ok {
			return 0, fmt.Errorf("string keys, want %s", c.o.zipKey)
		}
		d, err := k.GetContents()
		if err != nil {
			return 0, err
		}
		b.AppendValues(d, nil)
		return len(d), nil
	}
	return 0, fmt.Errorf("got %T, want %s keys", v, c.o.zipKey)
}

func (c *mapCollector) appendValues(v ort.Value) (int, error) {
	switch c.o.kind {
	case kindFloat32:
		return appendMapValues[float32](c.bld.ItemBuilder(), v, c.o.kind)
	case kindFloat64:
		return appendMapValues[float64](c.bld.ItemBuilder(), v, c.o.kind)
	case kindInt32:
		return appendMapValues[int32](c.bld.ItemBuilder(), v, c.o.kind)
	default:
		return appendMapValues[int64](c.bld.ItemBuilder(), v, c.o.kind)
	}
}

func appendMapValues[T elem](b array.Builder, v ort.Value, k elemKind) (int, error) {
	t, ok := v.(*ort.Tensor[T])
	if !ok {
		return 0, fmt.Errorf("got %T, want %s values", v, k)
	}
	d := t.GetData()
	switch b := b.(type) {
	case *array.Float32Builder:
		b.AppendValues(any(d).([]float32), nil)
	case *array.Float64Builder:
		b.AppendValues(any(d).([]float64), nil)
	case *array.Int32Builder:
		b.AppendValues(any(d).([]int32), nil)
	case *array.Int64Builder:
		b.AppendValues(any(d).([]int64), nil)
	default:
		return 0, fmt.Errorf("item builder %T", b)
	}
	return len(d), nil
}

func (c *mapCollector) array(n int) arrow.Array {
	arr := c.bld.NewArray()
	c.bld.Release()
	return arr
}
