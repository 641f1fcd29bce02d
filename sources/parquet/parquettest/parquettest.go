// Package parquettest edits the footer of a Parquet file in place, to
// build files that writers at hand do not produce (a codec this reader
// cannot decode, a logical type newer than it knows, an old writer's row
// count) for tests of how the Parquet source refuses or reads them.
package parquettest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/precog-ml/precog/sources/parquet/internal/tcompact"
)

// Thrift field ids of parquet.thrift used here.
const (
	fileSchema       = 2 // FileMetaData.schema
	fileNumRows      = 3 // FileMetaData.num_rows
	fileRowGroups    = 4 // FileMetaData.row_groups
	rowGroupColumns  = 1 // RowGroup.columns
	chunkMetaData    = 3 // ColumnChunk.meta_data
	metaPathInSchema = 3 // ColumnMetaData.path_in_schema
	metaCodec        = 4 // ColumnMetaData.codec
	metaCompressed   = 7 // ColumnMetaData.total_compressed_size
	elementName      = 4 // SchemaElement.name
	elementLogical   = 10
)

// Codec ids of parquet.thrift's CompressionCodec.
const (
	CodecLZO int32 = 3
)

// SetCodec makes every chunk of the column (its dotted path) claim codec:
// the pages are unchanged, only the footer says otherwise.
func SetCodec(path, column string, codec int32) error {
	return setChunkField(path, column, metaCodec, thrift.I32, codec)
}

// SetCompressedSize makes every chunk of the column (its dotted path) claim
// n compressed bytes (negative or past the end of the file, say).
func SetCompressedSize(path, column string, n int64) error {
	return setChunkField(path, column, metaCompressed, thrift.I64, n)
}

func setChunkField(path, column string, id int16, typ thrift.TType, v any) error {
	return edit(path, func(root tcompact.Struct) error {
		found := false
		for _, rg := range listOf(root.Get(fileRowGroups)) {
			for _, cc := range listOf(rg.(tcompact.Struct).Get(rowGroupColumns)) {
				md, ok := cc.(tcompact.Struct).Get(chunkMetaData).(tcompact.Struct)
				if !ok {
					return errors.New("column chunk without metadata")
				}
				var parts []string
				for _, p := range listOf(md.Get(metaPathInSchema)) {
					parts = append(parts, string(p.([]byte)))
				}
				if strings.Join(parts, ".") == column {
					md.Set(id, typ, v)
					found = true
				}
			}
		}
		if !found {
			return fmt.Errorf("no column %q", column)
		}
		return nil
	})
}

// SetNumRows sets the file's row count (an old writer's 0, say), leaving
// the row groups' counts as they are.
func SetNumRows(path string, n int64) error {
	return edit(path, func(root tcompact.Struct) error {
		root.Set(fileNumRows, thrift.I64, n)
		return nil
	})
}

// SetUnknownLogicalType annotates the top-level column named column with
// a logical type whose union member id no reader knows (as a newer writer
// would write a type added after this reader).
func SetUnknownLogicalType(path, column string, id int16) error {
	return edit(path, func(root tcompact.Struct) error {
		elems := listOf(root.Get(fileSchema))
		for i, e := range elems {
			se := e.(tcompact.Struct)
			if name, _ := se.Get(elementName).([]byte); string(name) == column {
				union := tcompact.Struct{{ID: id, Type: thrift.STRUCT, Value: tcompact.Struct{}}}
				elems[i] = se.Set(elementLogical, thrift.STRUCT, union)
				return nil
			}
		}
		return fmt.Errorf("no column %q", column)
	})
}

func listOf(v any) []any {
	if l, ok := v.(*tcompact.List); ok {
		return l.Values
	}
	return nil
}

// edit decodes the footer of the file at path, applies fn and writes the
// file back with the re-encoded footer.
func edit(path string, fn func(tcompact.Struct) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(data) < 12 || !bytes.Equal(data[len(data)-4:], []byte("PAR1")) {
		return fmt.Errorf("%s: not a plaintext parquet file", path)
	}
	n := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	if n <= 0 || n > len(data)-12 {
		return fmt.Errorf("%s: bad footer length %d", path, n)
	}
	body := data[:len(data)-8-n]
	root, err := tcompact.Decode(data[len(data)-8-n : len(data)-8])
	if err != nil {
		return fmt.Errorf("%s: decoding footer: %w", path, err)
	}
	if err := fn(root); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	footer, err := tcompact.Encode(root)
	if err != nil {
		return fmt.Errorf("%s: encoding footer: %w", path, err)
	}
	out := append(append([]byte(nil), body...), footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	out = append(out, "PAR1"...)
	return os.WriteFile(path, out, 0o644)
}
