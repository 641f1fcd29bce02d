package profile

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/zeebo/xxh3"
)

// The stored form of a profile is base64 text (the ledgers keep it as a
// string) of a compact binary encoding, version byte first:
//
//	version      1 byte (codecV1)
//	rows         uvarint
//	sample_size  uvarint
//	cap          uvarint (0: none)
//	fields       uvarint count, then per field (sorted by name):
//	             name, rows, nulls, values, min, max, list, sketch
//	sample       uvarint count, then per key (in hash order):
//	             key, then the values: uvarint count of fields, per field
//	             its name, a uvarint count and each value tagged
//	             (f32, f64 or string)
//
// Strings and byte strings are a uvarint length and the bytes; floats are
// IEEE bits, little endian. A key's hash is not stored: it is xxh3 of the
// key, recomputed on decode. A shard's profile with a 2,000-key sample is
// about a fifth of its JSON form and decodes in a tenth of the time; the
// check step at publish decodes one per shard. Profiles stored as JSON by
// earlier versions (their text starts with '{') still decode.

const codecV1 = 1

// Value tags in the sample.
const (
	tagF32 = iota
	tagF64
	tagString
)

var errShort = errors.New("truncated")

// sortedKeys makes the encoding deterministic.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Encode is the profile as stored in the ledger.
func (p *Profile) Encode() string {
	b := []byte{codecV1}
	b = binary.AppendUvarint(b, uint64(max(p.Rows, 0)))
	b = binary.AppendUvarint(b, uint64(max(p.SampleSize, 0)))
	b = binary.AppendUvarint(b, p.Cap)
	names := sortedKeys(p.Fields)
	b = binary.AppendUvarint(b, uint64(len(names)))
	var sk []byte
	for _, name := range names {
		f := p.Fields[name]
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(max(f.Rows, 0)))
		b = binary.AppendUvarint(b, uint64(max(f.Nulls, 0)))
		b = binary.AppendUvarint(b, uint64(max(f.Values, 0)))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Min))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Max))
		b = append(b, boolByte(f.List))
		sk = sk[:0]
		if f.dd != nil {
			f.dd.Encode(&sk, false)
		} else {
			sk = append(sk, f.Sketch...)
		}
		b = appendString(b, string(sk))
	}
	b = binary.AppendUvarint(b, uint64(len(p.Sample)))
	for _, s := range p.Sample {
		b = appendString(b, s.Key)
		vnames := sortedKeys(s.Values)
		b = binary.AppendUvarint(b, uint64(len(vnames)))
		for _, vn := range vnames {
			b = appendString(b, vn)
			vs := s.Values[vn]
			b = binary.AppendUvarint(b, uint64(len(vs)))
			for _, v := range vs {
				b = appendValue(b, v)
			}
		}
	}
	return base64.StdEncoding.EncodeToString(b)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// appendValue encodes one sampled value: a float64 that a float32 holds
// exactly (model outputs are float32) in 4 bytes.
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case float64:
		if f := float32(x); float64(f) == x || math.IsNaN(x) {
			b = append(b, tagF32)
			return binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
		b = append(b, tagF64)
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	case string:
		return appendString(append(b, tagString), x)
	}
	return appendString(append(b, tagString), fmt.Sprint(v))
}

// Decode reads a stored profile; a corrupt one is an ErrCorrupt, never a
// panic (profiles are ledger rows, possibly written by another version).
func Decode(s string) (*Profile, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	var p *Profile
	switch {
	case len(b) > 0 && b[0] == '{':
		p, err = decodeJSON(b)
	case len(b) > 0 && b[0] == codecV1:
		p, err = decodeV1(b[1:])
	default:
		err = fmt.Errorf("%w: unknown encoding", ErrCorrupt)
	}
	if err != nil {
		return nil, err
	}
	return p.validate()
}

// reader walks an encoded profile; its first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least minBytes each, refusing one the
// bytes left cannot hold.
func (r *reader) count(minBytes int) int {
	v := r.uvarint()
	if r.err == nil && v > uint64(len(r.b)/max(minBytes, 1)) {
		r.err = fmt.Errorf("count %d exceeds the %d bytes left", v, len(r.b))
		return 0
	}
	return int(v)
}

func (r *reader) int64() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.err = fmt.Errorf("count %d overflows", v)
		return 0
	}
	return int64(v)
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.bytes(r.count(1))) }

func (r *reader) u64() uint64 {
	if v := r.bytes(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.bytes(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *reader) byte() byte {
	if v := r.bytes(1); v != nil {
		return v[0]
	}
	return 0
}

func decodeV1(b []byte) (*Profile, error) {
	r := &reader{b: b}
	p := &Profile{Rows: r.int64(), Fields: map[string]*Field{}}
	p.SampleSize = int(min(r.int64(), math.MaxInt32))
	p.Cap = r.uvarint()
	for range r.count(20) {
		name := r.string()
		f := &Field{Rows: r.int64(), Nulls: r.int64(), Values: r.int64(),
			Min: math.Float64frombits(r.u64()), Max: math.Float64frombits(r.u64()), List: r.byte() == 1}
		f.Sketch = r.bytes(r.count(1))
		p.Fields[name] = f
	}
	n := r.count(2)
	if r.err == nil {
		p.Sample = make([]Sampled, 0, n)
	}
	for range n {
		s := Sampled{Key: r.string()}
		s.Hash = xxh3.HashString(s.Key)
		for range r.count(2) {
			vn := r.string()
			vs := make([]any, 0, r.count(2))
			for range cap(vs) {
				vs = append(vs, r.value())
			}
			if s.Values == nil {
				s.Values = map[string][]any{}
			}
			s.Values[vn] = vs
		}
		p.Sample = append(p.Sample, s)
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes after the sample", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, r.err)
	}
	return p, nil
}

func (r *reader) value() any {
	switch tag := r.byte(); tag {
	case tagF32:
		return float64(math.Float32frombits(r.u32()))
	case tagF64:
		return math.Float64frombits(r.u64())
	case tagString:
		return r.string()
	default:
		if r.err == nil {
			r.err = fmt.Errorf("value tag %d", tag)
		}
		return nil
	}
}
