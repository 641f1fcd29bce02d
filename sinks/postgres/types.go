package postgres

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Postgres type OIDs the binary COPY encoder writes into array headers
// (array_recv checks the element type).
const (
	oidBool   = 16
	oidInt8   = 20
	oidInt4   = 23
	oidText   = 25
	oidFloat4 = 700
	oidFloat8 = 701
)

// column is one output column: its SQL type and how to encode its values in
// the binary COPY format.
type column struct {
	name   string
	sqlTyp string
	field  arrow.Field
	// vector: stored as pgvector vector(n) (a float32 list field named in
	// the spec's vector option, where the extension is installed).
	vector bool
}

// pgEpochMicros is 2000-01-01T00:00:00Z, the zero of Postgres timestamps, in
// Unix microseconds.
var pgEpochMicros = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// scalarType maps an Arrow scalar type to its Postgres type and array
// element OID; ok is false for types the sink cannot store.
func scalarType(dt arrow.DataType) (sqlTyp string, oid uint32, ok bool) {
	switch dt.ID() {
	case arrow.BOOL:
		return "boolean", oidBool, true
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.UINT8, arrow.UINT16:
		return "integer", oidInt4, true
	case arrow.INT64, arrow.UINT32, arrow.UINT64:
		return "bigint", oidInt8, true
	case arrow.FLOAT16, arrow.FLOAT32:
		return "real", oidFloat4, true
	case arrow.FLOAT64:
		return "double precision", oidFloat8, true
	case arrow.STRING, arrow.LARGE_STRING:
		return "text", oidText, true
	case arrow.TIMESTAMP:
		return "timestamptz", 0, true
	}
	return "", 0, false
}

// listElem returns the element type of a list-like type, or nil.
func listElem(dt arrow.DataType) (arrow.DataType, int) {
	switch t := dt.(type) {
	case *arrow.ListType:
		return t.Elem(), -1
	case *arrow.LargeListType:
		return t.Elem(), -1
	case *arrow.FixedSizeListType:
		return t.Elem(), int(t.Len())
	}
	return nil, 0
}

// columnsFor maps the run's Arrow schema to Postgres columns. vector names
// the float32 list fields to store as vector(n) when useVector is true.
func columnsFor(schema *arrow.Schema, vector map[string]bool, useVector bool) ([]column, error) {
	cols := make([]column, 0, schema.NumFields())
	seen := map[string]bool{}
	for i, f := range schema.Fields() {
		if err := checkIdent(f.Name); err != nil {
			return nil, fmt.Errorf("output field %d %q: %w", i, f.Name, err)
		}
		if seen[f.Name] {
			return nil, fmt.Errorf("output field %q appears twice", f.Name)
		}
		seen[f.Name] = true
		c := column{name: f.Name, field: f}
		if mt, ok := f.Type.(*arrow.MapType); ok {
			if err := jsonbMapType(mt); err != nil {
				return nil, fmt.Errorf("output field %q: %w", f.Name, err)
			}
			if vector[f.Name] {
				return nil, fmt.Errorf("output field %q: vector needs a list of float32, have %s", f.Name, f.Type)
			}
			c.sqlTyp = "jsonb"
		} else if elem, n := listElem(f.Type); elem != nil {
			st, _, ok := scalarType(elem)
			if !ok || elem.ID() == arrow.TIMESTAMP {
				return nil, fmt.Errorf("output field %q: list of %s cannot be stored in Postgres", f.Name, elem)
			}
			c.sqlTyp = st + "[]"
			if vector[f.Name] {
				if elem.ID() != arrow.FLOAT32 {
					return nil, fmt.Errorf("output field %q: vector needs a list of float32, have list of %s", f.Name, elem)
				}
				if useVector {
					c.vector = true
					c.sqlTyp = "vector"
					if n > 0 {
						c.sqlTyp = fmt.Sprintf("vector(%d)", n)
					}
				}
			}
		} else {
			st, _, ok := scalarType(f.Type)
			if !ok {
				return nil, fmt.Errorf("output field %q: type %s cannot be stored in Postgres", f.Name, f.Type)
			}
			if vector[f.Name] {
				return nil, fmt.Errorf("output field %q: vector needs a list of float32, have %s", f.Name, f.Type)
			}
			c.sqlTyp = st
		}
		cols = append(cols, c)
	}
	for name := range vector {
		if !seen[name] {
			return nil, fmt.Errorf("vector: field %q is not an output field", name)
		}
	}
	return cols, nil
}

// checkIdent rejects identifiers Postgres would truncate or cannot hold.
// Everything else is allowed: identifiers are always quoted.
func checkIdent(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty identifier")
	case len(s) > 63:
		return fmt.Errorf("identifier %q is %d bytes, Postgres allows 63", s, len(s))
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("identifier %q contains a NUL byte", s)
	case !utf8.ValidString(s):
		return fmt.Errorf("identifier %q is not valid UTF-8", s)
	}
	return nil
}

// encodeFunc appends the binary COPY field (length + value) of row i.
type encodeFunc func(buf []byte, i int) ([]byte, error)

func appendNull(buf []byte) []byte { return binary.BigEndian.AppendUint32(buf, math.MaxUint32) }

// encoderFor returns the encoder of one column of a batch. It is built once
// per batch, so rows are encoded without allocation.
func encoderFor(c column, arr arrow.Array) (encodeFunc, error) {
	if m, ok := arr.(*array.Map); ok {
		return jsonbMapEncoder(c.name, m)
	}
	if elem, _ := listElem(arr.DataType()); elem != nil {
		return listEncoder(c, arr)
	}
	scalar, err := scalarEncoder(c.name, arr)
	if err != nil {
		return nil, err
	}
	return func(buf []byte, i int) ([]byte, error) {
		if arr.IsNull(i) {
			return appendNull(buf), nil
		}
		return scalar(buf, i)
	}, nil
}

// scalarEncoder encodes non-null values of arr with their length prefix.
func scalarEncoder(name string, arr arrow.Array) (encodeFunc, error) {
	be := binary.BigEndian
	switch a := arr.(type) {
	case *array.Boolean:
		return func(b []byte, i int) ([]byte, error) {
			v := byte(0)
			if a.Value(i) {
				v = 1
			}
			return append(be.AppendUint32(b, 1), v), nil
		}, nil
	case *array.Int8:
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), uint32(int32(a.Value(i)))), nil
		}, nil
	case *array.Int16:
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), uint32(int32(a.Value(i)))), nil
		}, nil
	case *array.Int32:
		v := a.Int32Values()
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), uint32(v[i])), nil
		}, nil
	case *array.Uint8:
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), uint32(a.Value(i))), nil
		}, nil
	case *array.Uint16:
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), uint32(a.Value(i))), nil
		}, nil
	case *array.Int64:
		v := a.Int64Values()
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint64(be.AppendUint32(b, 8), uint64(v[i])), nil
		}, nil
	case *array.Uint32:
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint64(be.AppendUint32(b, 8), uint64(a.Value(i))), nil
		}, nil
	case *array.Uint64:
		return func(b []byte, i int) ([]byte, error) {
			v := a.Value(i)
			if v > math.MaxInt64 {
				return nil, fmt.Errorf("column %q: value %d overflows bigint", name, v)
			}
			return be.AppendUint64(be.AppendUint32(b, 8), v), nil
		}, nil
	case *array.Float16:
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), math.Float32bits(a.Value(i).Float32())), nil
		}, nil
	case *array.Float32:
		v := a.Float32Values()
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint32(be.AppendUint32(b, 4), math.Float32bits(v[i])), nil
		}, nil
	case *array.Float64:
		v := a.Float64Values()
		return func(b []byte, i int) ([]byte, error) {
			return be.AppendUint64(be.AppendUint32(b, 8), math.Float64bits(v[i])), nil
		}, nil
	case *array.String:
		return func(b []byte, i int) ([]byte, error) {
			s := a.Value(i)
			if strings.IndexByte(s, 0) >= 0 {
				return nil, fmt.Errorf("column %q: text value contains a NUL byte", name)
			}
			return append(be.AppendUint32(b, uint32(len(s))), s...), nil
		}, nil
	case *array.LargeString:
		return func(b []byte, i int) ([]byte, error) {
			s := a.Value(i)
			if strings.IndexByte(s, 0) >= 0 {
				return nil, fmt.Errorf("column %q: text value contains a NUL byte", name)
			}
			return append(be.AppendUint32(b, uint32(len(s))), s...), nil
		}, nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		v := a.TimestampValues()
		return func(b []byte, i int) ([]byte, error) {
			us := int64(v[i])
			switch unit {
			case arrow.Second:
				us *= 1_000_000
			case arrow.Millisecond:
				us *= 1_000
			case arrow.Nanosecond:
				us /= 1_000
			}
			return be.AppendUint64(be.AppendUint32(b, 8), uint64(us-pgEpochMicros)), nil
		}, nil
	}
	return nil, fmt.Errorf("column %q: type %s cannot be stored in Postgres", name, arr.DataType())
}

// listEncoder encodes a list column as a one-dimensional Postgres array (or
// a pgvector vector).
func listEncoder(c column, arr arrow.Array) (encodeFunc, error) {
	var (
		values  arrow.Array
		offsets func(i int) (int64, int64)
	)
	switch a := arr.(type) {
	case *array.List:
		values, offsets = a.ListValues(), a.ValueOffsets
	case *array.LargeList:
		values, offsets = a.ListValues(), a.ValueOffsets
	case *array.FixedSizeList:
		n := int64(a.DataType().(*arrow.FixedSizeListType).Len())
		off := int64(a.Offset())
		values = a.ListValues()
		offsets = func(i int) (int64, int64) { s := (off + int64(i)) * n; return s, s + n }
	default:
		return nil, fmt.Errorf("column %q: type %s cannot be stored in Postgres", c.name, arr.DataType())
	}
	be := binary.BigEndian
	if c.vector {
		f32, ok := values.(*array.Float32)
		if !ok {
			return nil, fmt.Errorf("column %q: vector needs float32 elements, have %s", c.name, values.DataType())
		}
		v := f32.Float32Values()
		return func(b []byte, i int) ([]byte, error) {
			if arr.IsNull(i) {
				return appendNull(b), nil
			}
			lo, hi := offsets(i)
			if f32.NullN() > 0 {
				for j := lo; j < hi; j++ {
					if f32.IsNull(int(j)) {
						return nil, fmt.Errorf("column %q: vector element %d is null", c.name, j-lo)
					}
				}
			}
			n := hi - lo
			if n > math.MaxUint16 {
				return nil, fmt.Errorf("column %q: vector of %d elements (pgvector allows 16000)", c.name, n)
			}
			b = be.AppendUint32(b, uint32(4+4*n))
			b = be.AppendUint16(b, uint16(n))
			b = be.AppendUint16(b, 0)
			for _, x := range v[lo:hi] {
				b = be.AppendUint32(b, math.Float32bits(x))
			}
			return b, nil
		}, nil
	}
	_, elemOID, ok := scalarType(values.DataType())
	if !ok || elemOID == 0 {
		return nil, fmt.Errorf("column %q: list of %s cannot be stored in Postgres", c.name, values.DataType())
	}
	elem, err := scalarEncoder(c.name, values)
	if err != nil {
		return nil, err
	}
	return func(b []byte, i int) ([]byte, error) {
		if arr.IsNull(i) {
			return appendNull(b), nil
		}
		lo, hi := offsets(i)
		lenAt := len(b)
		b = be.AppendUint32(b, 0) // length, patched below
		start := len(b)
		hasNull := uint32(0)
		if values.NullN() > 0 {
			for j := lo; j < hi; j++ {
				if values.IsNull(int(j)) {
					hasNull = 1
					break
				}
			}
		}
		if hi == lo {
			b = be.AppendUint32(b, 0) // ndim 0: the empty array
			b = be.AppendUint32(b, 0)
			b = be.AppendUint32(b, elemOID)
		} else {
			b = be.AppendUint32(b, 1)
			b = be.AppendUint32(b, hasNull)
			b = be.AppendUint32(b, elemOID)
			b = be.AppendUint32(b, uint32(hi-lo))
			b = be.AppendUint32(b, 1) // lower bound
			for j := lo; j < hi; j++ {
				if hasNull == 1 && values.IsNull(int(j)) {
					b = appendNull(b)
					continue
				}
				var err error
				if b, err = elem(b, int(j)); err != nil {
					return nil, err
				}
			}
		}
		be.PutUint32(b[lenAt:], uint32(len(b)-start))
		return b, nil
	}, nil
}
