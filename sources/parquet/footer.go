package parquet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/thrift/lib/go/thrift"
)

// This file reads footers whose schema carries a logical type newer than
// arrow-go knows. The Parquet format says a reader ignores an unknown
// logical type and uses the physical type, but arrow-go's schema builder
// panics on one ("invalid logical type"). arrow-go's Thrift types are
// internal, so the footer is decoded generically here, the unknown
// annotations are dropped, and the rewritten footer is handed to arrow-go
// (file.WithMetadata). Only files whose footer fails to parse take this
// path.

// Thrift field ids of the footer structures (parquet.thrift).
const (
	fileMetaDataSchema       = 2  // FileMetaData.schema: list<SchemaElement>
	schemaElementName        = 4  // SchemaElement.name
	schemaElementNumChildren = 5  // SchemaElement.num_children
	schemaElementLogicalType = 10 // SchemaElement.logicalType: union LogicalType
)

// knownLogicalTypes are the LogicalType union members arrow-go maps
// (STRING=1 … TIMESTAMP=8, INTEGER=10 … GEOGRAPHY=18; 9 is unused).
var knownLogicalTypes = map[int16]bool{
	1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true,
	10: true, 11: true, 12: true, 13: true, 14: true, 15: true, 16: true, 17: true, 18: true,
}

// maxThriftDepth bounds nesting when decoding a footer generically, so a
// hostile footer cannot exhaust the stack.
const maxThriftDepth = 64

// maxFooterSize bounds the footer read for the rewrite.
const maxFooterSize = 256 << 20

// footerWithoutUnknownLogicalTypes reads the plaintext footer of f, drops
// every schema element's logical type that arrow-go does not know, and
// returns the parsed metadata with the dotted paths of the columns whose
// annotation was dropped. It returns no columns (and nil metadata) when
// the footer has no unknown logical type, so the caller keeps its
// original error.
func footerWithoutUnknownLogicalTypes(f io.ReaderAt, size int64) (md *metadata.FileMetaData, columns []string, err error) {
	raw, err := readFooterBytes(f, size)
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	conf := &thrift.TConfiguration{MaxMessageSize: int32(len(raw)) + 1}
	in := thrift.NewTCompactProtocolConf(&thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(raw)}, conf)
	root, err := readStruct(ctx, in, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding footer: %w", err)
	}
	columns = dropUnknownLogicalTypes(root)
	if len(columns) == 0 {
		return nil, nil, nil
	}
	buf := thrift.NewTMemoryBuffer()
	out := thrift.NewTCompactProtocolConf(buf, conf)
	if err := writeStruct(ctx, out, root); err != nil {
		return nil, nil, fmt.Errorf("re-encoding footer: %w", err)
	}
	if err := out.Flush(ctx); err != nil {
		return nil, nil, fmt.Errorf("re-encoding footer: %w", err)
	}
	md, err = metadata.NewFileMetaData(buf.Bytes(), nil)
	if err != nil {
		return nil, nil, err
	}
	return md, columns, nil
}

// readFooterBytes returns the Thrift FileMetaData of a plaintext
// ("PAR1") Parquet file.
func readFooterBytes(f io.ReaderAt, size int64) ([]byte, error) {
	if size < 12 {
		return nil, fmt.Errorf("file too small (%d bytes)", size)
	}
	var tail [8]byte
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return nil, fmt.Errorf("reading footer length: %w", err)
	}
	if string(tail[4:]) != "PAR1" {
		return nil, errors.New("not a plaintext parquet footer")
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n <= 0 || n > size-12 || n > maxFooterSize {
		return nil, fmt.Errorf("bad footer length %d", n)
	}
	raw := make([]byte, n)
	if _, err := f.ReadAt(raw, size-8-n); err != nil {
		return nil, fmt.Errorf("reading footer: %w", err)
	}
	return raw, nil
}

// dropUnknownLogicalTypes removes, in place, the logicalType of every
// schema element whose union member arrow-go does not know, and returns
// those elements' dotted paths (the root excluded).
func dropUnknownLogicalTypes(root tStruct) []string {
	var elems []any
	for _, fl := range root {
		if fl.id == fileMetaDataSchema && fl.typ == thrift.LIST {
			elems = fl.val.(*tList).vals
		}
	}
	// The schema is a depth-first list; a stack of (path, children left)
	// recovers each element's path.
	type frame struct {
		path string
		left int32
	}
	var stack []frame
	var dropped []string
	for i, e := range elems {
		se, ok := e.(tStruct)
		if !ok {
			return dropped
		}
		var name string
		var children int32
		for _, fl := range se {
			switch {
			case fl.id == schemaElementName && fl.typ == thrift.STRING:
				name = string(fl.val.([]byte))
			case fl.id == schemaElementNumChildren && fl.typ == thrift.I32:
				children = fl.val.(int32)
			}
		}
		for len(stack) > 0 && stack[len(stack)-1].left == 0 {
			stack = stack[:len(stack)-1]
		}
		path := name
		if len(stack) > 0 {
			stack[len(stack)-1].left--
			if parent := stack[len(stack)-1].path; parent != "" {
				path = parent + "." + name
			}
		}
		if i == 0 {
			path = "" // the root is not part of column paths
		}
		for j, fl := range se {
			if fl.id != schemaElementLogicalType || fl.typ != thrift.STRUCT || knownLogicalType(fl.val.(tStruct)) {
				continue
			}
			se = append(se[:j:j], se[j+1:]...)
			elems[i] = se
			dropped = append(dropped, path)
			break
		}
		if children > 0 {
			stack = append(stack, frame{path: path, left: children})
		}
	}
	return dropped
}

func knownLogicalType(union tStruct) bool {
	for _, fl := range union {
		if knownLogicalTypes[fl.id] {
			return true
		}
	}
	return false
}

// tStruct, tList and tMap hold a Thrift value decoded without its IDL:
// enough to rewrite a footer field and re-encode the rest unchanged.
type tStruct []tField

type tField struct {
	id  int16
	typ thrift.TType
	val any
}

type tList struct {
	elem thrift.TType
	set  bool
	vals []any
}

type tMap struct {
	key, val   thrift.TType
	keys, vals []any
}

func readStruct(ctx context.Context, p thrift.TProtocol, depth int) (tStruct, error) {
	if depth > maxThriftDepth {
		return nil, errors.New("nested too deeply")
	}
	if _, err := p.ReadStructBegin(ctx); err != nil {
		return nil, err
	}
	var s tStruct
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
		s = append(s, tField{id: id, typ: typ, val: v})
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
		if depth > maxThriftDepth {
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
		l := &tList{elem: elem, set: typ == thrift.SET}
		for range n {
			v, err := readValue(ctx, p, elem, depth+1)
			if err != nil {
				return nil, err
			}
			l.vals = append(l.vals, v)
		}
		if typ == thrift.LIST {
			return l, p.ReadListEnd(ctx)
		}
		return l, p.ReadSetEnd(ctx)
	case thrift.MAP:
		if depth > maxThriftDepth {
			return nil, errors.New("nested too deeply")
		}
		kt, vt, n, err := p.ReadMapBegin(ctx)
		if err != nil {
			return nil, err
		}
		m := &tMap{key: kt, val: vt}
		for range n {
			k, err := readValue(ctx, p, kt, depth+1)
			if err != nil {
				return nil, err
			}
			v, err := readValue(ctx, p, vt, depth+1)
			if err != nil {
				return nil, err
			}
			m.keys, m.vals = append(m.keys, k), append(m.vals, v)
		}
		return m, p.ReadMapEnd(ctx)
	}
	return nil, fmt.Errorf("unsupported thrift type %d", typ)
}

func writeStruct(ctx context.Context, p thrift.TProtocol, s tStruct) error {
	if err := p.WriteStructBegin(ctx, ""); err != nil {
		return err
	}
	for _, fl := range s {
		if err := p.WriteFieldBegin(ctx, "", fl.typ, fl.id); err != nil {
			return err
		}
		if err := writeValue(ctx, p, fl.typ, fl.val); err != nil {
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
		return writeStruct(ctx, p, v.(tStruct))
	case thrift.LIST, thrift.SET:
		l := v.(*tList)
		var err error
		if l.set {
			err = p.WriteSetBegin(ctx, l.elem, len(l.vals))
		} else {
			err = p.WriteListBegin(ctx, l.elem, len(l.vals))
		}
		if err != nil {
			return err
		}
		for _, e := range l.vals {
			if err := writeValue(ctx, p, l.elem, e); err != nil {
				return err
			}
		}
		if l.set {
			return p.WriteSetEnd(ctx)
		}
		return p.WriteListEnd(ctx)
	case thrift.MAP:
		m := v.(*tMap)
		if err := p.WriteMapBegin(ctx, m.key, m.val, len(m.keys)); err != nil {
			return err
		}
		for i := range m.keys {
			if err := writeValue(ctx, p, m.key, m.keys[i]); err != nil {
				return err
			}
			if err := writeValue(ctx, p, m.val, m.vals[i]); err != nil {
				return err
			}
		}
		return p.WriteMapEnd(ctx)
	}
	return fmt.Errorf("unsupported thrift type %d", typ)
}

// joinColumns lists column paths for a message.
func joinColumns(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = fmt.Sprintf("%q", c)
	}
	return strings.Join(q, ", ")
}
