package lookup

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/internal/floattext"
	"github.com/precog-ml/precog/internal/jsontext"
)

// JSON numbers are written as the Redis sink writes them: the shortest text
// that reads back to the same value at the column's width (float32 columns
// with 32-bit precision), so a value from any source compares bit-for-bit.

func appendFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("non-finite value %v", f)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits), nil
}

// appendFloat32 is appendFloat for a float32, through the formatter the
// Redis sink writes its records with (the same bytes, at half strconv's
// cost: live answers of vector models are mostly float text).
func appendFloat32(dst []byte, f float32) ([]byte, error) {
	if !floattext.Finite32(f) {
		return dst, fmt.Errorf("non-finite value %v", f)
	}
	return floattext.AppendFloat32(dst, f), nil
}

// arrowJSON renders row i of a (an inference output column) as JSON.
func arrowJSON(dst []byte, a arrow.Array, i int) ([]byte, error) {
	if a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	switch c := a.(type) {
	case *array.Float32:
		return appendFloat32(dst, c.Value(i))
	case *array.Float64:
		return appendFloat(dst, c.Value(i), 64)
	case *array.Int32:
		return strconv.AppendInt(dst, int64(c.Value(i)), 10), nil
	case *array.Int64:
		return strconv.AppendInt(dst, c.Value(i), 10), nil
	case *array.String:
		return jsontext.AppendString(dst, c.Value(i)), nil
	case *array.Map: // a ZipMap output: a JSON object, keys as strings
		start, end := c.ValueOffsets(i)
		keys, items := c.Keys(), c.Items()
		dst = append(dst, '{')
		for j := int(start); j < int(end); j++ {
			if j > int(start) {
				dst = append(dst, ',')
			}
			k, err := arrowJSON(nil, keys, j)
			if err != nil {
				return dst, err
			}
			if k[0] != '"' {
				k = strconv.AppendQuote(nil, string(k)) // an integer key's digits
			}
			dst = append(append(dst, k...), ':')
			if dst, err = arrowJSON(dst, items, j); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case array.ListLike:
		start, end := c.ValueOffsets(i)
		vals := c.ListValues()
		if vals.NullN() == 0 {
			// The usual top-k lists: the values' slice read directly,
			// without a type switch per element.
			switch v := vals.(type) {
			case *array.Float32:
				return appendFloat32s(dst, v.Float32Values()[start:end])
			case *array.Int64:
				return appendInt64s(dst, v.Int64Values()[start:end]), nil
			}
		}
		dst = append(dst, '[')
		for j := start; j < end; j++ {
			if j > start {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = arrowJSON(dst, vals, int(j)); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return dst, fmt.Errorf("output type %s cannot be rendered as JSON", a.DataType())
}

// appendFloat32s appends vs as a JSON array of shortest float32 texts.
func appendFloat32s(dst []byte, vs []float32) ([]byte, error) {
	dst = append(dst, '[')
	dst, bad := floattext.AppendFloat32s(dst, vs)
	if bad >= 0 {
		return dst, fmt.Errorf("non-finite value %v", vs[bad])
	}
	return append(dst, ']'), nil
}

// appendInt64s appends vs as a JSON array of integers.
func appendInt64s(dst []byte, vs []int64) []byte {
	dst = append(dst, '[')
	for j, v := range vs {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, v, 10)
	}
	return append(dst, ']')
}

// pgJSON renders a value pgx decoded from a result column as JSON.
func pgJSON(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case float32:
		return appendFloat32(dst, x)
	case float64:
		return appendFloat(dst, x, 64)
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case string:
		return jsontext.AppendString(dst, x), nil
	case time.Time:
		return strconv.AppendQuote(dst, x.UTC().Format(time.RFC3339Nano)), nil
	case []any:
		dst = append(dst, '[')
		for j, e := range x {
			if j > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = pgJSON(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case []float32:
		return appendFloat32s(dst, x)
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return dst, fmt.Errorf("value of type %T: %w", v, err)
		}
		return append(dst, b...), nil
	}
}

// pgFloats reads a feature value pgx decoded (a number or an array of
// numbers) as float64s; ok is false for NULLs and non-numeric values.
func pgFloats(v any) ([]float64, bool) {
	switch x := v.(type) {
	case float32:
		return []float64{float64(x)}, true
	case float64:
		return []float64{x}, true
	case int16:
		return []float64{float64(x)}, true
	case int32:
		return []float64{float64(x)}, true
	case int64:
		return []float64{float64(x)}, true
	case []any:
		out := make([]float64, 0, len(x))
		for _, e := range x {
			f, ok := pgFloats(e)
			if !ok || len(f) != 1 {
				return nil, false
			}
			out = append(out, f[0])
		}
		return out, true
	case []float32:
		out := make([]float64, len(x))
		for i, e := range x {
			out[i] = float64(e)
		}
		return out, true
	case []float64:
		return x, true
	}
	return nil, false
}
