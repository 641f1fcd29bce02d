package postgres

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// decodeInt reads a binary int2/int4/int8 (the shard column), 0 for NULL.
func decodeInt(v []byte) int64 {
	switch len(v) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(v)))
	case 4:
		return int64(int32(binary.BigEndian.Uint32(v)))
	case 8:
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// decoder appends binary-format values of one column to an Arrow builder.
type decoder interface {
	// reserve makes room for n more values.
	reserve(n int)
	// append decodes one value; nil is NULL.
	append(v []byte) error
	// finish returns the values appended since the last finish.
	finish() arrow.Array
	release()
}

func newDecoder(t *readType) decoder {
	if t.elemOID != 0 {
		elem := t.arrow.(*arrow.ListType).Elem()
		return &listDec{typ: t.arrow, elemOID: t.elemOID, elems: fixedBuf{typ: elem, size: fixedSize(t.elemOID)}}
	}
	switch t.oid {
	case oidBool:
		return &boolDec{}
	case oidText:
		return &stringDec{b: array.NewStringBuilder(memory.DefaultAllocator)}
	default:
		return &fixedDec{fixedBuf{typ: t.arrow, size: fixedSize(t.oid)}}
	}
}

// fixedSize is the binary size of a fixed-width numeric type.
func fixedSize(oid uint32) int {
	switch oid {
	case oidInt2:
		return 2
	case oidInt4, oidFloat4:
		return 4
	default: // int8, float8
		return 8
	}
}

// fixedBuf accumulates fixed-width numbers straight into an Arrow
// little-endian data buffer: a binary int2/int4/int8/float4/float8 is the
// same bits big-endian, so decoding is a byte swap, with no per-type code
// and no builder. The validity bitmap is allocated at the first NULL.
type fixedBuf struct {
	typ   arrow.DataType
	size  int
	data  []byte
	valid []byte
	n     int
	nulls int
}

// reserve makes room for n more values, keeping those appended so far.
func (f *fixedBuf) reserve(n int) {
	need := (f.n + n) * f.size
	if need <= cap(f.data) {
		return
	}
	grown := make([]byte, f.n*f.size, max(need, 2*cap(f.data)))
	copy(grown, f.data[:f.n*f.size])
	f.data = grown
	if f.valid != nil {
		v := make([]byte, bitutil.BytesForBits(int64(cap(grown)/f.size)))
		copy(v, f.valid)
		f.valid = v
	}
}

// appendValue appends a value whose length was checked to be f.size.
func (f *fixedBuf) appendValue(v []byte) {
	if (f.n+1)*f.size > cap(f.data) {
		f.reserve(max(f.n, 64))
	}
	off := f.n * f.size
	f.data = f.data[:off+f.size]
	switch f.size {
	case 2:
		binary.LittleEndian.PutUint16(f.data[off:], binary.BigEndian.Uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(f.data[off:], binary.BigEndian.Uint32(v))
	default:
		binary.LittleEndian.PutUint64(f.data[off:], binary.BigEndian.Uint64(v))
	}
	if f.valid != nil {
		bitutil.SetBit(f.valid, f.n)
	}
	f.n++
}

func (f *fixedBuf) appendNull() {
	if (f.n+1)*f.size > cap(f.data) {
		f.reserve(max(f.n, 64))
	}
	if f.valid == nil {
		f.valid = make([]byte, bitutil.BytesForBits(int64(cap(f.data)/f.size)))
		bitutil.SetBitsTo(f.valid, 0, int64(f.n), true)
	}
	off := f.n * f.size
	f.data = f.data[:off+f.size]
	clear(f.data[off:])
	f.n++
	f.nulls++
}

// finish hands the buffers to a new array and starts empty ones.
func (f *fixedBuf) finish() arrow.Array {
	var valid *memory.Buffer
	if f.valid != nil {
		valid = memory.NewBufferBytes(f.valid[:bitutil.BytesForBits(int64(f.n))])
	}
	d := array.NewData(f.typ, f.n, []*memory.Buffer{valid, memory.NewBufferBytes(f.data)}, nil, f.nulls, 0)
	defer d.Release()
	*f = fixedBuf{typ: f.typ, size: f.size}
	return array.MakeFromData(d)
}

// fixedDec decodes a fixed-width numeric column.
type fixedDec struct{ fixedBuf }

func (d *fixedDec) append(v []byte) error {
	if v == nil {
		d.appendNull()
		return nil
	}
	if len(v) != d.size {
		return fmt.Errorf("binary value of %d bytes, want %d", len(v), d.size)
	}
	d.appendValue(v)
	return nil
}

func (d *fixedDec) release() { d.fixedBuf = fixedBuf{} }

// boolDec decodes bool columns.
type boolDec struct{ b *array.BooleanBuilder }

func (d *boolDec) reserve(n int) {
	if d.b == nil {
		d.b = array.NewBooleanBuilder(memory.DefaultAllocator)
	}
	d.b.Reserve(n)
}

func (d *boolDec) append(v []byte) error {
	switch {
	case v == nil:
		d.b.AppendNull()
	case len(v) != 1:
		return fmt.Errorf("binary bool of %d bytes", len(v))
	default:
		d.b.Append(v[0] != 0)
	}
	return nil
}

func (d *boolDec) finish() arrow.Array { return d.b.NewArray() }

func (d *boolDec) release() {
	if d.b != nil {
		d.b.Release()
		d.b = nil
	}
}

// stringDec copies text values (their binary format is the UTF-8 bytes).
type stringDec struct{ b *array.StringBuilder }

func (d *stringDec) reserve(n int) { d.b.Reserve(n) }

func (d *stringDec) append(v []byte) error {
	if v == nil {
		d.b.AppendNull()
		return nil
	}
	d.b.BinaryBuilder.Append(v)
	return nil
}

func (d *stringDec) finish() arrow.Array { return d.b.NewArray() }

func (d *stringDec) release() { d.b.Release() }

// listDec decodes a one-dimensional binary array into a List. The binary
// array format is: ndim, has-nulls flag, element OID, then (length, lower
// bound) per dimension, then per element a length (-1: NULL) and its bytes.
type listDec struct {
	typ     arrow.DataType
	elemOID uint32
	offsets []int32
	valid   []byte // list validity, allocated at the first NULL list
	n       int
	nulls   int
	elems   fixedBuf
}

func (d *listDec) reserve(n int) {
	if cap(d.offsets) < d.n+n+1 {
		grown := make([]int32, d.n+1, d.n+n+1)
		copy(grown, d.offsets)
		d.offsets = grown
		if d.valid != nil {
			v := make([]byte, bitutil.BytesForBits(int64(cap(grown))))
			copy(v, d.valid)
			d.valid = v
		}
	}
	if len(d.offsets) == 0 {
		d.offsets = d.offsets[:1]
	}
}

// endList records the end offset of list d.n (valid or not).
func (d *listDec) endList(valid bool) {
	d.reserve(1)
	if !valid && d.valid == nil {
		d.valid = make([]byte, bitutil.BytesForBits(int64(cap(d.offsets))))
		bitutil.SetBitsTo(d.valid, 0, int64(d.n), true)
	}
	if d.valid != nil {
		bitutil.SetBitTo(d.valid, d.n, valid)
	}
	if !valid {
		d.nulls++
	}
	d.offsets = append(d.offsets, int32(d.elems.n))
	d.n++
}

func (d *listDec) append(v []byte) error {
	if v == nil {
		d.endList(false)
		return nil
	}
	if len(v) < 12 {
		return fmt.Errorf("binary array of %d bytes is too short", len(v))
	}
	ndim := int32(binary.BigEndian.Uint32(v))
	if oid := binary.BigEndian.Uint32(v[8:]); oid != d.elemOID {
		return fmt.Errorf("array of element type oid %d, want %d", oid, d.elemOID)
	}
	switch {
	case ndim == 0:
		d.endList(true)
		return nil
	case ndim != 1:
		return fmt.Errorf("%d-dimensional array, want one dimension", ndim)
	case len(v) < 20:
		return fmt.Errorf("binary array of %d bytes is too short", len(v))
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	p := v[20:]
	size := d.elems.size
	if n < 0 || n > len(p)/4 {
		return fmt.Errorf("array length %d does not fit its %d bytes", n, len(v))
	}
	if d.elems.n+n > math.MaxInt32 {
		return fmt.Errorf("batch holds over %d list elements; use a smaller batch size", math.MaxInt32)
	}
	// Validate the whole value before appending anything, so a corrupt
	// value never leaves a half-appended list.
	q := p
	for i := 0; i < n; i++ {
		if len(q) < 4 {
			return fmt.Errorf("array truncated at element %d", i)
		}
		l := int32(binary.BigEndian.Uint32(q))
		q = q[4:]
		if l == -1 {
			continue
		}
		if int(l) != size || len(q) < size {
			return fmt.Errorf("array element %d of %d bytes, want %d", i, l, size)
		}
		q = q[size:]
	}
	d.elems.reserve(n)
	for i := 0; i < n; i++ {
		l := int32(binary.BigEndian.Uint32(p))
		p = p[4:]
		if l == -1 {
			d.elems.appendNull()
			continue
		}
		d.elems.appendValue(p)
		p = p[size:]
	}
	d.endList(true)
	return nil
}

func (d *listDec) finish() arrow.Array {
	values := d.elems.finish()
	defer values.Release()
	if len(d.offsets) == 0 {
		d.offsets = []int32{0}
	}
	var valid *memory.Buffer
	if d.valid != nil {
		valid = memory.NewBufferBytes(d.valid[:bitutil.BytesForBits(int64(d.n))])
	}
	offs := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(d.offsets))
	data := array.NewData(d.typ, d.n, []*memory.Buffer{valid, offs}, []arrow.ArrayData{values.Data()}, d.nulls, 0)
	defer data.Release()
	*d = listDec{typ: d.typ, elemOID: d.elemOID, elems: d.elems}
	return array.MakeFromData(data)
}

func (d *listDec) release() { d.offsets, d.valid, d.elems = nil, nil, fixedBuf{} }
