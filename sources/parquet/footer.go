package parquet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/precog-ml/precog/sources/parquet/internal/tcompact"
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

// maxFooterSize bounds the footer read for the rewrite.
const maxFooterSize = 256 << 20

// footerWithoutUnknownLogicalTypes reads the plaintext footer of f, drops
// every schema element's logical type that arrow-go does not know, and
// returns the parsed metadata with the dotted paths of the columns whose
// annotation was dropped. It returns no columns (and nil metadata) when
// the footer has no unknown logical type, so the caller keeps its
// original error.
func footerWithoutUnknownLogicalTypes(f io.ReaderAt, size int64) (md *metadata.FileMetaData, columns []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			md, columns, err = nil, nil, fmt.Errorf("corrupt parquet footer: %v", r)
		}
	}()
	raw, err := readFooterBytes(f, size)
	if err != nil {
		return nil, nil, err
	}
	root, err := tcompact.Decode(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding footer: %w", err)
	}
	columns = dropUnknownLogicalTypes(root)
	if len(columns) == 0 {
		return nil, nil, nil
	}
	rewritten, err := tcompact.Encode(root)
	if err != nil {
		return nil, nil, fmt.Errorf("re-encoding footer: %w", err)
	}
	md, err = metadata.NewFileMetaData(rewritten, nil)
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
func dropUnknownLogicalTypes(root tcompact.Struct) []string {
	l, ok := root.Get(fileMetaDataSchema).(*tcompact.List)
	if !ok {
		return nil
	}
	elems := l.Values
	// The schema is a depth-first list; a stack of (path, children left)
	// recovers each element's path.
	type frame struct {
		path string
		left int32
	}
	var stack []frame
	var dropped []string
	for i, e := range elems {
		se, ok := e.(tcompact.Struct)
		if !ok {
			return dropped
		}
		nameBytes, _ := se.Get(schemaElementName).([]byte)
		children, _ := se.Get(schemaElementNumChildren).(int32)
		name := string(nameBytes)
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
		if lt, ok := se.Get(schemaElementLogicalType).(tcompact.Struct); ok && !knownLogicalType(lt) {
			elems[i] = se.Delete(schemaElementLogicalType)
			dropped = append(dropped, path)
		}
		if children > 0 {
			stack = append(stack, frame{path: path, left: children})
		}
	}
	return dropped
}

func knownLogicalType(union tcompact.Struct) bool {
	for _, fl := range union {
		if knownLogicalTypes[fl.ID] {
			return true
		}
	}
	return false
}
