package redis

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/tinylib/msgp/msgp"

	"github.com/precog-ml/precog/internal/floattext"
	"github.com/precog-ml/precog/internal/jsontext"
	"github.com/precog-ml/precog/jobs"
)

// Record encodings (sinks.redis.encoding, jobs.RedisEncoding) as the
// Shards hash and {namespace}:meta record them.
const (
	// EncodingJSON writes each record as a JSON object (the default).
	EncodingJSON = string(jobs.RedisEncodingJSON)
	// EncodingMsgpack writes the same object as a MessagePack map: field
	// names as str, numbers as msgpack ints and float32/float64, strings
	// (computed_at and dates in the same RFC 3339 text as JSON) as str,
	// nulls as nil, lists as arrays, except that a list of float32 without
	// nulls is one bin of little-endian float32s (4 bytes an element,
	// against 10 to 12 as JSON text). A list of float32 with a null in it
	// stays an array of float32 and nil.
	EncodingMsgpack = string(jobs.RedisEncodingMsgpack)
)

// The msgpack form is appended with tinylib/msgp's append-style runtime
// (msgp.Append*, msgp.Read*Bytes): no reflection, no allocation, straight
// into the pipeline arena like the JSON form.

// setEncoding selects the encoder's record encoding (EncodingJSON when
// empty). Field names are precomputed as msgpack str for msgpack.
func (e *recordEncoder) setEncoding(encoding string) error {
	switch encoding {
	case "", EncodingJSON:
		e.msgpack = false
		return nil
	case EncodingMsgpack:
	default:
		return fmt.Errorf("encoding %q is not json or msgpack", encoding)
	}
	e.msgpack = true
	e.mpHeader = msgp.AppendMapHeader(nil, uint32(len(e.cols)))
	e.mpNames = make([][]byte, len(e.names))
	for j, n := range e.names {
		e.mpNames[j] = msgp.AppendString(nil, n)
	}
	return nil
}

// appendMsgpackRecord appends row's msgpack map to dst. Non-finite floats
// are refused as in JSON: a record must read back through the lookup API,
// whose responses are JSON.
func (b *boundBatch) appendMsgpackRecord(dst []byte, row int) ([]byte, error) {
	dst = append(dst, b.enc.mpHeader...)
	var err error
	for j, w := range b.cols {
		dst = append(dst, b.enc.mpNames[j]...)
		if dst, err = w.appendMsgpack(dst, row); err != nil {
			return dst, fmt.Errorf("field %q: %w", b.enc.names[j], err)
		}
	}
	return dst, nil
}

func (w boolWriter) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	return msgp.AppendBool(dst, w.a.Value(i)), nil
}

func (w intWriter[T]) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	return msgp.AppendInt64(dst, int64(w.vals[i])), nil
}

func (w uintWriter[T]) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	return msgp.AppendUint64(dst, uint64(w.vals[i])), nil
}

func (w floatWriter[T]) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	f := float64(w.vals[i])
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, errNonFinite(f)
	}
	if w.bitSize == 32 {
		return msgp.AppendFloat32(dst, float32(f)), nil
	}
	return msgp.AppendFloat64(dst, f), nil
}

func (w float32Writer) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	if f := w.vals[i]; floattext.Finite32(f) {
		return msgp.AppendFloat32(dst, f), nil
	}
	return dst, errNonFinite(w.vals[i])
}

// appendBin appends vals[start:end] as one msgpack bin of little-endian
// float32s.
func (w float32Writer) appendBin(dst []byte, start, end int) ([]byte, error) {
	vals := w.vals[start:end]
	dst = msgp.AppendBytesHeader(dst, uint32(4*len(vals)))
	for _, f := range vals {
		if !floattext.Finite32(f) {
			return dst, errNonFinite(f)
		}
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(f))
	}
	return dst, nil
}

func (w stringWriter) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	return msgp.AppendString(dst, w.a.Value(i)), nil
}

func (w *timestampWriter) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	// The JSON text without its quotes, cached per value as for JSON.
	w.format(w.a.Value(i))
	s := w.lastB[1 : len(w.lastB)-1]
	return msgp.AppendString(dst, unsafe.String(unsafe.SliceData(s), len(s))), nil
}

func (w dateWriter) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	var buf [16]byte
	s := w.a.Value(i).ToTime().AppendFormat(buf[:0], "2006-01-02")
	return msgp.AppendString(dst, unsafe.String(unsafe.SliceData(s), len(s))), nil
}

func (w listWriter) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	start, end := w.a.ValueOffsets(i)
	if f, ok := w.elem.(float32Writer); ok && (f.a.NullN() == 0 || noNulls(f.a, int(start), int(end))) {
		return f.appendBin(dst, int(start), int(end))
	}
	dst = msgp.AppendArrayHeader(dst, uint32(end-start))
	var err error
	for j := int(start); j < int(end); j++ {
		if dst, err = w.elem.appendMsgpack(dst, j); err != nil {
			return dst, fmt.Errorf("element: %w", err)
		}
	}
	return dst, nil
}

func noNulls(a nullable, start, end int) bool {
	for i := start; i < end; i++ {
		if a.IsNull(i) {
			return false
		}
	}
	return true
}

// IsMsgpackRecord reports whether a stored value is a msgpack record
// rather than a JSON one. The two never overlap: a JSON record starts with
// '{' (or whitespace), a msgpack record with a map header (0x80-0x8f,
// 0xde, 0xdf), so readers need not know which encoding a version used.
func IsMsgpackRecord(rec []byte) bool {
	return len(rec) > 0 && (rec[0]&0xf0 == 0x80 || rec[0] == 0xde || rec[0] == 0xdf)
}

// AppendRecordJSON appends a stored record as the JSON object the JSON
// encoding would have stored for the same row, byte for byte: a JSON
// record is copied as is, a msgpack one is transcoded (float32 bins
// become arrays of shortest float32 text). This is how readers (the
// lookup API, tools reading Redis directly) decode either encoding.
func AppendRecordJSON(dst, rec []byte) ([]byte, error) {
	if !IsMsgpackRecord(rec) {
		return append(dst, rec...), nil
	}
	dst, rest, err := appendMsgpackJSON(dst, rec, 0)
	if err != nil {
		return dst, fmt.Errorf("msgpack record: %w", err)
	}
	if len(rest) != 0 {
		return dst, fmt.Errorf("msgpack record: %d bytes after the map", len(rest))
	}
	return dst, nil
}

// maxNesting bounds the recursion on corrupt or hostile input.
const maxNesting = 32

// appendMsgpackJSON transcodes the msgpack value at the start of b.
func appendMsgpackJSON(dst, b []byte, depth int) ([]byte, []byte, error) {
	if depth > maxNesting {
		return dst, b, fmt.Errorf("nested deeper than %d", maxNesting)
	}
	var err error
	switch msgp.NextType(b) {
	case msgp.MapType:
		return appendMsgpackMap(dst, b, depth)
	case msgp.ArrayType:
		return appendMsgpackArray(dst, b, depth)
	case msgp.BinType: // a float32 vector
		return appendFloat32Bin(dst, b)
	case msgp.StrType:
		var s []byte
		if s, b, err = msgp.ReadStringZC(b); err != nil {
			return dst, b, err
		}
		return jsontext.AppendString(dst, unsafe.String(unsafe.SliceData(s), len(s))), b, nil
	case msgp.Float32Type:
		var f float32
		if f, b, err = msgp.ReadFloat32Bytes(b); err != nil {
			return dst, b, err
		}
		if !floattext.Finite32(f) {
			return dst, b, errNonFinite(f)
		}
		return floattext.AppendFloat32(dst, f), b, nil
	case msgp.Float64Type:
		var f float64
		if f, b, err = msgp.ReadFloat64Bytes(b); err != nil {
			return dst, b, err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, b, errNonFinite(f)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64), b, nil
	case msgp.IntType:
		var i int64
		if i, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return dst, b, err
		}
		return strconv.AppendInt(dst, i, 10), b, nil
	case msgp.UintType:
		var u uint64
		if u, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return dst, b, err
		}
		return strconv.AppendUint(dst, u, 10), b, nil
	case msgp.BoolType:
		var t bool
		if t, b, err = msgp.ReadBoolBytes(b); err != nil {
			return dst, b, err
		}
		return strconv.AppendBool(dst, t), b, nil
	case msgp.NilType:
		if b, err = msgp.ReadNilBytes(b); err != nil {
			return dst, b, err
		}
		return append(dst, "null"...), b, nil
	case msgp.InvalidType:
		return dst, b, fmt.Errorf("truncated or invalid value")
	}
	return dst, b, fmt.Errorf("msgpack type %s has no JSON form in a record", msgp.NextType(b))
}

// appendMsgpackMap transcodes the msgpack map at the start of b to a JSON
// object (keys are strings, as the record's fields are).
func appendMsgpackMap(dst, b []byte, depth int) ([]byte, []byte, error) {
	var err error
	var n uint32
	if n, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
		return dst, b, err
	}
	dst = append(dst, '{')
	for i := uint32(0); i < n; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		var k []byte
		if k, b, err = msgp.ReadStringZC(b); err != nil {
			return dst, b, fmt.Errorf("map key: %w", err)
		}
		dst = jsontext.AppendString(dst, unsafe.String(unsafe.SliceData(k), len(k)))
		dst = append(dst, ':')
		if dst, b, err = appendMsgpackJSON(dst, b, depth+1); err != nil {
			return dst, b, fmt.Errorf("field %q: %w", k, err)
		}
	}
	return append(dst, '}'), b, nil
}

// appendMsgpackArray transcodes the msgpack array at the start of b.
func appendMsgpackArray(dst, b []byte, depth int) ([]byte, []byte, error) {
	var err error
	var n uint32
	if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
		return dst, b, err
	}
	dst = append(dst, '[')
	for i := uint32(0); i < n; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, b, err = appendMsgpackJSON(dst, b, depth+1); err != nil {
			return dst, b, err
		}
	}
	return append(dst, ']'), b, nil
}

// appendFloat32Bin transcodes a bin of little-endian float32s (a vector) to
// a JSON array of shortest float32 texts.
func appendFloat32Bin(dst, b []byte) ([]byte, []byte, error) {
	var err error
	var v []byte
	if v, b, err = msgp.ReadBytesZC(b); err != nil {
		return dst, b, err
	}
	if len(v)%4 != 0 {
		return dst, b, fmt.Errorf("float32 vector of %d bytes (not a multiple of 4)", len(v))
	}
	dst = append(dst, '[')
	for i := 0; i < len(v); i += 4 {
		if i > 0 {
			dst = append(dst, ',')
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(v[i:]))
		if !floattext.Finite32(f) {
			return dst, b, errNonFinite(f)
		}
		dst = floattext.AppendFloat32(dst, f)
	}
	return append(dst, ']'), b, nil
}
