// Package tcompact decodes and encodes Thrift compact-protocol values
// without their IDL, as a tree of structs, lists and maps. The Parquet
// source uses it to rewrite a file footer field arrow-go cannot parse
// (arrow-go's Thrift types are internal) and re-encode the rest unchanged;
// tests use it to build footers no writer produces.
package tcompact

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/apache/thrift/lib/go/thrift"
)

// maxDepth bounds nesting, so that a hostile input cannot exhaust the
// stack.
const maxDepth = 64

// Struct is a decoded Thrift struct: its fields in wire order.
type Struct []Field

// Get returns the value of field id, or nil.
func (s Struct) Get(id int16) any {
	for _, f := range s {
		if f.ID == id {
			return f.Value
		}
	}
	return nil
}

// Set replaces the value of field id, or appends the field.
func (s Struct) Set(id int16, typ thrift.TType, v any) Struct {
	for i := range s {
		if s[i].ID == id {
			s[i].Type, s[i].Value = typ, v
			return s
		}
	}
	return append(s, Field{ID: id, Type: typ, Value: v})
}

// Delete removes field id.
func (s Struct) Delete(id int16) Struct {
	out := s[:0:0]
	for _, f := range s {
		if f.ID != id {
			out = append(out, f)
		}
	}
	return out
}

// Decode reads one struct from the start of data.
func Decode(data []byte) (Struct, error) {
	conf := &thrift.TConfiguration{MaxMessageSize: int32(min(len(data), 1<<30)) + 1}
	p := thrift.NewTCompactProtocolConf(&thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(data)}, conf)
	return readStruct(context.Background(), p, 0)
}

// Encode writes s.
func Encode(s Struct) ([]byte, error) {
	ctx := context.Background()
	buf := thrift.NewTMemoryBuffer()
	p := thrift.NewTCompactProtocolConf(buf, &thrift.TConfiguration{})
	if err := writeStruct(ctx, p, s); err != nil {
		return nil, err
	}
	if err := p.Flush(ctx); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Field is one field of a Struct.
type Field struct {
	ID   int16
	Type thrift.TType
	// Value is bool, int8, int16, int32, int64, float64, []byte, Struct,
	// *List or *Map, as Type says.
	Value any
}

// List is a decoded list or set.
type List struct {
	Elem   thrift.TType
	IsSet  bool
	Values []any
}

// Map is a decoded map, its keys and values in wire order.
type Map struct {
	Key, Value   thrift.TType
	Keys, Values []any
}

func readStruct(ctx context.Context, p thrift.TProtocol, depth int) (Struct, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deeply")
	}
	if _, err := p.ReadStructBegin(ctx); err != nil {
		return nil, err
	}
	var s Struct
	for {
		_, typ, id, err := p.ReadFieldBegin(ctx)
		if err != nil {
			return nil, err
		}
		if typ == thrift.STOP {
			break
		}
		v, err := readValue(ctx, p, typ, depth+1)
		if err != nil {
			return nil, fmt.Errorf("field %d: %w", id, err)
		}
		if err := p.ReadFieldEnd(ctx); err != nil {
			return nil, err
		}
		s = append(s, Field{ID: id, Type: typ, Value: v})
	}
	return s, p.ReadStructEnd(ctx)
}

func readValue(ctx context.Context, p thrift.TProtocol, typ thrift.TType, depth int) (any, error) {
	switch typ {
	case thrift.BOOL:
		return p.ReadBool(ctx)
	case thrift.BYTE:
		return p.ReadByte(ctx)
	case thrift.I16:
		return p.ReadI16(ctx)
	case thrift.I32:
		return p.ReadI32(ctx)
	case thrift.I64:
		return p.ReadI64(ctx)
	case thrift.DOUBLE:
		return p.ReadDouble(ctx)
	case thrift.STRING:
		return p.ReadBinary(ctx)
	case thrift.STRUCT:
		return readStruct(ctx, p, depth)
	case thrift.LIST, thrift.SET:
		if depth > maxDepth {
			return nil, errors.New("nested too deeply")
		}
		var elem thrift.TType
		var n int
		var err error
		if typ == thrift.LIST {
			elem, n, err = p.ReadListBegin(ctx)
		} else {
			elem, n, err = p.ReadSetBegin(ctx)
		}
		if err != nil {
			return nil, err
		}
		l := &List{Elem: elem, IsSet: typ == thrift.SET}
		for range n {
			v, err := readValue(ctx, p, elem, depth+1)
			if err != nil {
				return nil, err
			}
			l.Values = append(l.Values, v)
		}
		if typ == thrift.LIST {
			return l, p.ReadListEnd(ctx)
		}
		return l, p.ReadSetEnd(ctx)
	case thrift.MAP:
		if depth > maxDepth {
			return nil, errors.New("nested too deeply")
		}
		kt, vt, n, err := p.ReadMapBegin(ctx)
		if err != nil {
			return nil, err
		}
		m := &Map{Key: kt, Value: vt}
		for range n {
			k, err := readValue(ctx, p, kt, depth+1)
			if err != nil {
				return nil, err
			}
			v, err := readValue(ctx, p, vt, depth+1)
			if err != nil {
				return nil, err
			}
			m.Keys, m.Values = append(m.Keys, k), append(m.Values, v)
		}
		return m, p.ReadMapEnd(ctx)
	}
	return nil, fmt.Errorf("unsupported thrift type %d", typ)
}

func writeStruct(ctx context.Context, p thrift.TProtocol, s Struct) error {
	if err := p.WriteStructBegin(ctx, ""); err != nil {
		return err
	}
	for _, fl := range s {
		if err := p.WriteFieldBegin(ctx, "", fl.Type, fl.ID); err != nil {
			return err
		}
		if err := writeValue(ctx, p, fl.Type, fl.Value); err != nil {
			return err
		}
		if err := p.WriteFieldEnd(ctx); err != nil {
			return err
		}
	}
	if err := p.WriteFieldStop(ctx); err != nil {
		return err
	}
	return p.WriteStructEnd(ctx)
}

func writeValue(ctx context.Context, p thrift.TProtocol, typ thrift.TType, v any) error {
	switch typ {
	case thrift.BOOL:
		return p.WriteBool(ctx, v.(bool))
	case thrift.BYTE:
		return p.WriteByte(ctx, v.(int8))
	case thrift.I16:
		return p.WriteI16(ctx, v.(int16))
	case thrift.I32:
		return p.WriteI32(ctx, v.(int32))
	case thrift.I64:
		return p.WriteI64(ctx, v.(int64))
	case thrift.DOUBLE:
		return p.WriteDouble(ctx, v.(float64))
	case thrift.STRING:
		return p.WriteBinary(ctx, v.([]byte))
	case thrift.STRUCT:
		return writeStruct(ctx, p, v.(Struct))
	case thrift.LIST, thrift.SET:
		l := v.(*List)
		var err error
		if l.IsSet {
			err = p.WriteSetBegin(ctx, l.Elem, len(l.Values))
		} else {
			err = p.WriteListBegin(ctx, l.Elem, len(l.Values))
		}
		if err != nil {
			return err
		}
		for _, e := range l.Values {
			if err := writeValue(ctx, p, l.Elem, e); err != nil {
				return err
			}
		}
		if l.IsSet {
			return p.WriteSetEnd(ctx)
		}
		return p.WriteListEnd(ctx)
	case thrift.MAP:
		m := v.(*Map)
		if err := p.WriteMapBegin(ctx, m.Key, m.Value, len(m.Keys)); err != nil {
			return err
		}
		for i := range m.Keys {
			if err := writeValue(ctx, p, m.Key, m.Keys[i]); err != nil {
				return err
			}
			if err := writeValue(ctx, p, m.Value, m.Values[i]); err != nil {
				return err
			}
		}
		return p.WriteMapEnd(ctx)
	}
	return fmt.Errorf("unsupported thrift type %d", typ)
}
