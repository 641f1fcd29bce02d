package parquet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/errgroup"

	"github.com/precog-ml/precog/sources/parquet/internal/tcompact"
)

// This file also reads footers whose schema carries a logical type newer than
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

// footerConcurrency bounds how many file footers are read at once when a
// dataset has many files (Schema and Plan read every footer).
const footerConcurrency = 16

// warnedZeroRows remembers the files whose zero row count was warned about
// (Schema and Plan both read every footer).
var warnedZeroRows sync.Map

// footer is what planning needs from one file.
type footer struct {
	fp        fingerprint
	rowGroups []int64 // rows per row group
	schema    *arrow.Schema
}

func (s *Source) readFooter(ctx context.Context, path string) (ft footer, err error) {
	of, fp, err := s.openAny(ctx, path, nil)
	if err != nil {
		return footer{}, fmt.Errorf("parquet file %s: %w", path, err)
	}
	defer of.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet file %s: corrupt metadata: %v", path, r)
		}
	}()
	md := of.rdr.MetaData()
	sc, err := arrowSchema(md)
	if err != nil {
		return footer{}, fmt.Errorf("parquet file %s: schema: %w", path, err)
	}
	ft = footer{fp: fp, schema: sc, rowGroups: make([]int64, md.NumRowGroups())}
	var total int64
	for i := range ft.rowGroups {
		n := md.RowGroup(i).NumRows()
		if n < 0 || total+n < total {
			return footer{}, fmt.Errorf("parquet file %s: row group %d: bad row count %d", path, i, n)
		}
		ft.rowGroups[i] = n
		total += n
	}
	if err := checkColumnChunks(md, fp.Size); err != nil {
		return footer{}, fmt.Errorf("parquet file %s: %w", path, err)
	}
	if total != md.NumRows {
		return footer{}, fmt.Errorf("parquet file %s: corrupt footer: row groups hold %d rows but the file says %d", path, total, md.NumRows)
	}
	if of.zeroRows {
		if _, dup := warnedZeroRows.LoadOrStore(path, true); !dup {
			slog.Warn("parquet file says it holds 0 rows but its row groups hold more; reading the row groups", "file", path, "rows", total)
		}
	}
	return ft, nil
}

// checkColumnChunks checks every column chunk of the footer before any is
// read. A chunk whose byte range lies outside the file is corrupt (arrow-go
// panics on a negative length, on a goroutine of its own for the children
// of a struct column, where it cannot be recovered). A chunk compressed
// with a codec this reader cannot decode (LZO, or a codec id newer than
// the format it knows) fails naming every such column and codec. It runs
// at plan time, from the footer, so that validate and run refuse such a
// file (exit 2) before anything runs instead of failing when the shard is
// opened.
func checkColumnChunks(md *metadata.FileMetaData, size int64) error {
	type bad struct {
		column string
		codec  compress.Compression
	}
	var found []bad
	seen := make(map[bad]bool)
	for rg := range md.NumRowGroups() {
		g := md.RowGroup(rg)
		for c := range g.NumColumns() {
			cc, err := g.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d, column %d: %w", rg, c, err)
			}
			start, n := chunkRange(cc)
			if start < 0 || n < 0 || start > size || n > size-start {
				return fmt.Errorf("row group %d, column %q: corrupt footer: column chunk at offset %d, %d bytes, outside the file (%d bytes)",
					rg, cc.PathInSchema().String(), start, n, size)
			}
			codec := cc.Compression()
			if _, err := compress.GetCodec(codec); err == nil {
				continue
			}
			b := bad{column: cc.PathInSchema().String(), codec: codec}
			if !seen[b] {
				seen[b] = true
				found = append(found, b)
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	parts := make([]string, len(found))
	for i, b := range found {
		parts[i] = fmt.Sprintf("column %q is compressed with %s (codec %d)", b.column, codecName(b.codec), int32(b.codec))
	}
	return fmt.Errorf("unsupported compression: %s; this reader decodes UNCOMPRESSED, SNAPPY, GZIP, BROTLI, ZSTD, LZ4 and LZ4_RAW: rewrite the file with one of them", strings.Join(parts, ", "))
}

// codecName is the codec's name in parquet.thrift, or "an unknown codec".
func codecName(c compress.Compression) string {
	if s := c.String(); s != "" && s != "<UNSET>" {
		return s
	}
	return "an unknown codec"
}

// readFooters reads every file's footer with bounded concurrency.
func (s *Source) readFooters(ctx context.Context) ([]footer, error) {
	out := make([]footer, len(s.files))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(footerConcurrency)
	for i, p := range s.files {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			ft, err := s.readFooter(ctx, p)
			if err != nil {
				return err
			}
			out[i] = ft
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
