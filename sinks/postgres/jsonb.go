package postgres

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// A map field (an sklearn classifier's ZipMap output: class label →
// probability) is stored as a jsonb object, keys as JSON strings, in the
// map's entry order (jsonb itself orders keys by length, then bytes):
// {"0": 0.25, "1": 0.75}. Analysts read a class with proba->>'1'.

// jsonbVersion is the first byte of jsonb's binary send/receive format.
const jsonbVersion = 1

// jsonbMapType checks that a map's keys and values have a JSON form here.
func jsonbMapType(t *arrow.MapType) error {
	switch t.KeyType().ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
	default:
		return fmt.Errorf("map key type %s cannot be stored as jsonb (string or integer keys)", t.KeyType())
	}
	switch t.ItemType().ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64, arrow.STRING, arrow.LARGE_STRING, arrow.BOOL:
	default:
		return fmt.Errorf("map value type %s cannot be stored as jsonb", t.ItemType())
	}
	return nil
}

// jsonbMapEncoder encodes each row's map as a binary COPY jsonb value.
func jsonbMapEncoder(name string, m *array.Map) (encodeFunc, error) {
	if err := jsonbMapType(m.DataType().(*arrow.MapType)); err != nil {
		return nil, fmt.Errorf("column %q: %w", name, err)
	}
	keys, items := m.Keys(), m.Items()
	be := binary.BigEndian
	return func(b []byte, i int) ([]byte, error) {
		if m.IsNull(i) {
			return appendNull(b), nil
		}
		lo, hi := m.ValueOffsets(i)
		lenAt := len(b)
		b = be.AppendUint32(b, 0) // length, patched below
		start := len(b)
		b = append(b, jsonbVersion, '{')
		var err error
		for j := int(lo); j < int(hi); j++ {
			if j > int(lo) {
				b = append(b, ',')
			}
			if b, err = appendJSONKey(b, keys, j); err != nil {
				return nil, fmt.Errorf("column %q: map key: %w", name, err)
			}
			b = append(b, ':')
			if b, err = appendJSONValue(b, items, j); err != nil {
				return nil, fmt.Errorf("column %q: map value: %w", name, err)
			}
		}
		b = append(b, '}')
		be.PutUint32(b[lenAt:], uint32(len(b)-start))
		return b, nil
	}, nil
}

// appendJSONKey writes entry j's key as a JSON string.
func appendJSONKey(b []byte, keys arrow.Array, j int) ([]byte, error) {
	switch k := keys.(type) {
	case *array.String:
		return appendJSONText(b, k.Value(j)), nil
	case *array.LargeString:
		return appendJSONText(b, k.Value(j)), nil
	}
	b = append(b, '"')
	b, err := appendJSONValue(b, keys, j)
	return append(b, '"'), err
}

// appendJSONValue writes entry j of a scalar array as JSON. Floats use the
// shortest text that reads back to the same value at their width; NaN and
// ±Inf have no JSON form and are an error.
func appendJSONValue(b []byte, a arrow.Array, j int) ([]byte, error) {
	if a.IsNull(j) {
		return append(b, "null"...), nil
	}
	switch v := a.(type) {
	case *array.Float32:
		return appendJSONFloat(b, float64(v.Value(j)), 32)
	case *array.Float64:
		return appendJSONFloat(b, v.Value(j), 64)
	case *array.Int8:
		return strconv.AppendInt(b, int64(v.Value(j)), 10), nil
	case *array.Int16:
		return strconv.AppendInt(b, int64(v.Value(j)), 10), nil
	case *array.Int32:
		return strconv.AppendInt(b, int64(v.Value(j)), 10), nil
	case *array.Int64:
		return strconv.AppendInt(b, v.Value(j), 10), nil
	case *array.Uint8:
		return strconv.AppendUint(b, uint64(v.Value(j)), 10), nil
	case *array.Uint16:
		return strconv.AppendUint(b, uint64(v.Value(j)), 10), nil
	case *array.Uint32:
		return strconv.AppendUint(b, uint64(v.Value(j)), 10), nil
	case *array.Uint64:
		return strconv.AppendUint(b, v.Value(j), 10), nil
	case *array.Boolean:
		return strconv.AppendBool(b, v.Value(j)), nil
	case *array.String:
		return appendJSONText(b, v.Value(j)), nil
	case *array.LargeString:
		return appendJSONText(b, v.Value(j)), nil
	}
	return b, fmt.Errorf("type %s has no JSON form", a.DataType())
}

// appendJSONText writes s as a JSON string (encoding/json's escaping;
// invalid UTF-8 becomes U+FFFD).
func appendJSONText(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

func appendJSONFloat(b []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, fmt.Errorf("non-finite value %v cannot be stored as jsonb", f)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits), nil
}
