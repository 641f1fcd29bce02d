package redis

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/internal/floattext"
	"github.com/precog-ml/precog/internal/jsontext"
)

// recordEncoder writes the rows of output batches as JSON objects straight
// from the Arrow columns into a caller's byte buffer: no reflection and no
// allocation per row (this is the sink's hot path). Field order follows the
// schema; the key column is not repeated inside the value.
type recordEncoder struct {
	keyCol int
	cols   []int    // schema indexes of the encoded (non-key) columns
	names  []string // their field names
	prefix [][]byte // `{"name":` for the first field, `,"name":` after
	// msgpack selects EncodingMsgpack (see setEncoding): then mpHeader is
	// the map header and mpNames the field names as msgpack str.
	msgpack  bool
	mpHeader []byte
	mpNames  [][]byte
}

// newRecordEncoder checks that every column of schema can be encoded and
// precomputes the field-name prefixes.
func newRecordEncoder(schema *arrow.Schema, key string) (*recordEncoder, error) {
	if schema == nil {
		return nil, fmt.Errorf("run schema is nil")
	}
	idx := schema.FieldIndices(key)
	if len(idx) != 1 {
		return nil, fmt.Errorf("key column %q: found %d times in the output schema (%s)", key, len(idx), schema)
	}
	e := &recordEncoder{keyCol: idx[0]}
	switch schema.Field(e.keyCol).Type.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
	default:
		return nil, fmt.Errorf("key column %q: type %s is not a string or integer", key, schema.Field(e.keyCol).Type)
	}
	for i, f := range schema.Fields() {
		if i == e.keyCol {
			continue
		}
		if err := encodable(f.Type); err != nil {
			return nil, fmt.Errorf("output field %q: %w", f.Name, err)
		}
		var p []byte
		if len(e.cols) == 0 {
			p = append(p, '{')
		} else {
			p = append(p, ',')
		}
		p = jsontext.AppendString(p, f.Name)
		p = append(p, ':')
		e.cols = append(e.cols, i)
		e.names = append(e.names, f.Name)
		e.prefix = append(e.prefix, p)
	}
	return e, nil
}

// encodable reports whether a column type has a JSON encoding here.
func encodable(t arrow.DataType) error {
	switch t.ID() {
	case arrow.BOOL, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64, arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW,
		arrow.TIMESTAMP, arrow.DATE32:
		return nil
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		return encodable(t.(arrow.ListLikeType).Elem())
	case arrow.MAP:
		return encodableMap(t.(*arrow.MapType))
	}
	return fmt.Errorf("type %s has no JSON encoding in the redis sink", t)
}

// boundBatch is a record batch prepared for encoding: typed column writers
// bound once per batch, then used for every row.
type boundBatch struct {
	enc  *recordEncoder
	key  keyWriter
	cols []valueWriter
}

// bind casts the batch's columns to typed writers; its schema must match
// the run schema (same field order and types).
func (e *recordEncoder) bind(rec arrow.RecordBatch) (*boundBatch, error) {
	if int(rec.NumCols()) <= e.keyCol {
		return nil, fmt.Errorf("batch has %d columns, run schema more", rec.NumCols())
	}
	b := &boundBatch{enc: e, cols: make([]valueWriter, len(e.cols))}
	k, err := newKeyWriter(rec.Column(e.keyCol))
	if err != nil {
		return nil, fmt.Errorf("key column %q: %w", rec.ColumnName(e.keyCol), err)
	}
	b.key = k
	for j, c := range e.cols {
		if c >= int(rec.NumCols()) || rec.ColumnName(c) != e.names[j] {
			return nil, fmt.Errorf("batch schema %s does not match the run schema (field %q)", rec.Schema(), e.names[j])
		}
		w, err := newValueWriter(rec.Column(c))
		if err != nil {
			return nil, fmt.Errorf("output field %q: %w", e.names[j], err)
		}
		b.cols[j] = w
	}
	return b, nil
}

// appendRecord appends row's record to dst: a JSON object, or a msgpack
// map with the msgpack encoding. A non-finite float is an error naming the
// field (JSON has no NaN); the caller adds the key.
func (b *boundBatch) appendRecord(dst []byte, row int) ([]byte, error) {
	if b.enc.msgpack {
		return b.appendMsgpackRecord(dst, row)
	}
	if len(b.cols) == 0 {
		return append(dst, '{', '}'), nil
	}
	var err error
	for j, w := range b.cols {
		dst = append(dst, b.enc.prefix[j]...)
		if dst, err = w.appendValue(dst, row); err != nil {
			return dst, fmt.Errorf("field %q: %w", b.enc.names[j], err)
		}
	}
	return append(dst, '}'), nil
}

// keyWriter appends a row's entity key (raw, as it appears in the Redis key).
type keyWriter interface {
	appendKey(dst []byte, row int) ([]byte, error)
}

type stringKey struct {
	a interface {
		Value(int) string
		IsNull(int) bool
	}
}

func (k stringKey) appendKey(dst []byte, row int) ([]byte, error) {
	if k.a.IsNull(row) {
		return dst, errNullKey
	}
	return append(dst, k.a.Value(row)...), nil
}

type intKey[T int8 | int16 | int32 | int64] struct {
	a interface {
		Value(int) T
		IsNull(int) bool
	}
}

func (k intKey[T]) appendKey(dst []byte, row int) ([]byte, error) {
	if k.a.IsNull(row) {
		return dst, errNullKey
	}
	return strconv.AppendInt(dst, int64(k.a.Value(row)), 10), nil
}

type uintKey[T uint8 | uint16 | uint32 | uint64] struct {
	a interface {
		Value(int) T
		IsNull(int) bool
	}
}

func (k uintKey[T]) appendKey(dst []byte, row int) ([]byte, error) {
	if k.a.IsNull(row) {
		return dst, errNullKey
	}
	return strconv.AppendUint(dst, uint64(k.a.Value(row)), 10), nil
}

var errNullKey = fmt.Errorf("null key")

func newKeyWriter(a arrow.Array) (keyWriter, error) {
	switch a := a.(type) {
	case *array.String:
		return stringKey{a}, nil
	case *array.LargeString:
		return stringKey{a}, nil
	case *array.StringView:
		return stringKey{a}, nil
	case *array.Int8:
		return intKey[int8]{a}, nil
	case *array.Int16:
		return intKey[int16]{a}, nil
	case *array.Int32:
		return intKey[int32]{a}, nil
	case *array.Int64:
		return intKey[int64]{a}, nil
	case *array.Uint8:
		return uintKey[uint8]{a}, nil
	case *array.Uint16:
		return uintKey[uint16]{a}, nil
	case *array.Uint32:
		return uintKey[uint32]{a}, nil
	case *array.Uint64:
		return uintKey[uint64]{a}, nil
	}
	return nil, fmt.Errorf("type %s is not a string or integer", a.DataType())
}

// valueWriter appends one value (appendValue) or a comma-separated run of
// values (appendRange, for list elements) of a column as JSON, or one value
// as msgpack (appendMsgpack, see msgpack.go).
type valueWriter interface {
	appendValue(dst []byte, row int) ([]byte, error)
	appendRange(dst []byte, start, end int) ([]byte, error)
	appendMsgpack(dst []byte, row int) ([]byte, error)
}

func newValueWriter(a arrow.Array) (valueWriter, error) {
	switch a := a.(type) {
	case *array.Boolean:
		return boolWriter{a}, nil
	case *array.Int8:
		return intWriter[int8]{a, a.Int8Values()}, nil
	case *array.Int16:
		return intWriter[int16]{a, a.Int16Values()}, nil
	case *array.Int32:
		return intWriter[int32]{a, a.Int32Values()}, nil
	case *array.Int64:
		return intWriter[int64]{a, a.Int64Values()}, nil
	case *array.Uint8:
		return uintWriter[uint8]{a, a.Uint8Values()}, nil
	case *array.Uint16:
		return uintWriter[uint16]{a, a.Uint16Values()}, nil
	case *array.Uint32:
		return uintWriter[uint32]{a, a.Uint32Values()}, nil
	case *array.Uint64:
		return uintWriter[uint64]{a, a.Uint64Values()}, nil
	case *array.Float32:
		return float32Writer{a, a.Float32Values()}, nil
	case *array.Float64:
		return floatWriter[float64]{a, a.Float64Values(), 64}, nil
	case *array.String:
		return stringWriter{a}, nil
	case *array.LargeString:
		return stringWriter{a}, nil
	case *array.StringView:
		return stringWriter{a}, nil
	case *array.Timestamp:
		toTime, err := a.DataType().(*arrow.TimestampType).GetToTimeFunc()
		if err != nil {
			return nil, err
		}
		return &timestampWriter{a: a, toTime: toTime}, nil
	case *array.Date32:
		return dateWriter{a}, nil
	case *array.Map:
		return newMapWriter(a)
	case array.ListLike:
		elem, err := newValueWriter(a.ListValues())
		if err != nil {
			return nil, fmt.Errorf("list element: %w", err)
		}
		return listWriter{a, elem}, nil
	}
	return nil, fmt.Errorf("type %s has no JSON encoding in the redis sink", a.DataType())
}

// nullable is the part of arrow.Array the writers need for nulls.
type nullable interface {
	IsNull(int) bool
	NullN() int
}

type boolWriter struct{ a *array.Boolean }

func (w boolWriter) appendValue(dst []byte, i int) ([]byte, error) {
	switch {
	case w.a.IsNull(i):
		return append(dst, "null"...), nil
	case w.a.Value(i):
		return append(dst, "true"...), nil
	}
	return append(dst, "false"...), nil
}

func (w boolWriter) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

type intWriter[T int8 | int16 | int32 | int64] struct {
	a    nullable
	vals []T
}

func (w intWriter[T]) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	return strconv.AppendInt(dst, int64(w.vals[i]), 10), nil
}

func (w intWriter[T]) appendRange(dst []byte, start, end int) ([]byte, error) {
	if w.a.NullN() != 0 {
		return appendRange(w, dst, start, end)
	}
	for i, v := range w.vals[start:end] {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(v), 10)
	}
	return dst, nil
}

type uintWriter[T uint8 | uint16 | uint32 | uint64] struct {
	a    nullable
	vals []T
}

func (w uintWriter[T]) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	return strconv.AppendUint(dst, uint64(w.vals[i]), 10), nil
}

func (w uintWriter[T]) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

// floatWriter formats with the column's own bit size, so that a float32
// reads back to exactly the same float32 (shortest round-trip digits).
type floatWriter[T float32 | float64] struct {
	a       nullable
	vals    []T
	bitSize int
}

// errNonFinite is returned for NaN and ±Inf, which JSON cannot hold.
type errNonFinite float64

func (e errNonFinite) Error() string {
	return fmt.Sprintf("non-finite value %v cannot be stored as JSON", float64(e))
}

func (w floatWriter[T]) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	f := float64(w.vals[i])
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, errNonFinite(f)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, w.bitSize), nil
}

func (w floatWriter[T]) appendRange(dst []byte, start, end int) ([]byte, error) {
	if w.a.NullN() != 0 {
		return appendRange(w, dst, start, end)
	}
	for i, v := range w.vals[start:end] {
		if i > 0 {
			dst = append(dst, ',')
		}
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, errNonFinite(f)
		}
		dst = strconv.AppendFloat(dst, f, 'g', -1, w.bitSize)
	}
	return dst, nil
}

// float32Writer is floatWriter[float32] through floattext.AppendFloat32, the same
// text at a fraction of strconv's cost: float32 lists (embeddings) are most
// of the bytes of wide records.
type float32Writer struct {
	a    nullable
	vals []float32
}

func (w float32Writer) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	if f := w.vals[i]; floattext.Finite32(f) {
		return floattext.AppendFloat32(dst, f), nil
	}
	return dst, errNonFinite(w.vals[i])
}

func (w float32Writer) appendRange(dst []byte, start, end int) ([]byte, error) {
	if w.a.NullN() != 0 {
		return appendRange(w, dst, start, end)
	}
	dst, bad := floattext.AppendFloat32s(dst, w.vals[start:end])
	if bad >= 0 {
		return dst, errNonFinite(w.vals[start+bad])
	}
	return dst, nil
}

type stringWriter struct {
	a interface {
		nullable
		Value(int) string
	}
}

func (w stringWriter) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	return jsontext.AppendString(dst, w.a.Value(i)), nil
}

func (w stringWriter) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

// timestampWriter writes RFC 3339 (nanosecond precision, UTC). computed_at
// is the same for a whole batch, so the last formatted value is cached.
type timestampWriter struct {
	a      *array.Timestamp
	toTime func(arrow.Timestamp) time.Time
	last   arrow.Timestamp
	lastB  []byte
}

func (w *timestampWriter) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	w.format(w.a.Value(i))
	return append(dst, w.lastB...), nil
}

// format leaves v's quoted JSON text in lastB (cached: computed_at is the
// same for a whole batch).
func (w *timestampWriter) format(v arrow.Timestamp) {
	if w.lastB == nil || v != w.last {
		b := append(w.lastB[:0], '"')
		b = w.toTime(v).UTC().AppendFormat(b, time.RFC3339Nano)
		w.lastB = append(b, '"')
		w.last = v
	}
}

func (w *timestampWriter) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

type dateWriter struct{ a *array.Date32 }

func (w dateWriter) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '"')
	dst = w.a.Value(i).ToTime().AppendFormat(dst, time.DateOnly)
	return append(dst, '"'), nil
}

func (w dateWriter) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

// listWriter writes list, large-list and fixed-size-list values as JSON
// arrays through the element writer's appendRange fast path.
type listWriter struct {
	a    array.ListLike
	elem valueWriter
}

func (w listWriter) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	start, end := w.a.ValueOffsets(i)
	dst = append(dst, '[')
	dst, err := w.elem.appendRange(dst, int(start), int(end))
	if err != nil {
		return dst, fmt.Errorf("element: %w", err)
	}
	return append(dst, ']'), nil
}

func (w listWriter) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

// appendRange is the generic comma-separated loop over appendValue.
func appendRange(w valueWriter, dst []byte, start, end int) ([]byte, error) {
	var err error
	for i := start; i < end; i++ {
		if i > start {
			dst = append(dst, ',')
		}
		if dst, err = w.appendValue(dst, i); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
