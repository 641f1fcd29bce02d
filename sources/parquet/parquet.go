// Package parquet is the Parquet implementation of sources.Source.
//
// A dataset is a file, a directory (every *.parquet file below it) or a glob,
// on disk or on object storage (s3://, gs://, azblob:// URLs, where prefixes
// work as directories; objects.go).
// Plans are made from file footers alone: a shard is a run of whole row groups
// of one file, or a row range of one row group when that group is larger than
// the shard size. Shards are read with arrow-go's pqarrow reader, which handles
// dictionary encoding, data page v1/v2 and nested lists, and streams pages so
// memory stays bounded by the batch size, not the file size.
//
// What arrow-go alone refuses but other readers (DuckDB, Arrow C++) read is
// read here too, so that every file of the apache/parquet-testing corpus that
// DuckDB reads is read (corpus_test.go pins each outcome): the legacy LZ4
// codec (Hadoop-framed or a bare block), empty compressed page sections,
// logical types newer than arrow-go (read by their physical type, with a
// warning), a footer row count of 0 from early writers, and seeks into row
// groups whose dictionary page precedes data_page_offset. A codec nobody
// here decodes (LZO), or a column chunk outside the file, is refused at plan
// time, naming file and column.
package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"golang.org/x/sync/errgroup"

	"github.com/precog-ml/precog/internal/bufpool"
	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/sources"
)

// footerConcurrency bounds how many file footers are read at once when a
// dataset has many files (Schema and Plan read every footer).
const footerConcurrency = 16

// maxShards bounds one plan. A corrupt footer can claim absurd row counts;
// this turns that into an error instead of an out-of-memory plan. At the
// default 250k rows per shard it allows 250 billion rows.
const maxShards = 1_000_000

// streamBufferSize is the read buffer per column chunk. Pages are read
// through it instead of loading whole column chunks, which keeps memory
// bounded for large row groups.
const streamBufferSize = 1 << 20

// Source is a Parquet dataset: a fixed, sorted list of files resolved once by
// New. It holds no open files, so it is safe for concurrent use.
type Source struct {
	path  string
	files []string
	// bucket is set for a dataset on object storage; files are then
	// object URLs of it.
	bucket *objstore.Bucket
}

var _ sources.Source = (*Source)(nil)

// New resolves path to its files. path is a file, a directory (all *.parquet
// files below it, recursively, skipping names that start with "_" or ".") or
// a glob such as "data/users/dt=*/*.parquet" (directories matched by the glob
// are walked like a directory).
// Files are sorted lexically so plans are stable. It fails when nothing
// matches. An object-store URL is resolved the same way over key prefixes
// (objects.go).
func New(path string) (*Source, error) {
	if path == "" {
		return nil, errors.New("parquet source: empty path")
	}
	src := &Source{path: path}
	var err error
	if objstore.IsURL(path) {
		src.bucket, src.files, err = resolveObjects(context.Background(), path)
	} else {
		src.files, err = resolve(path)
	}
	if err != nil {
		return nil, err
	}
	if len(src.files) == 0 {
		return nil, fmt.Errorf("parquet source %q: no parquet files matched", path)
	}
	return src, nil
}

// Files returns the resolved files in plan order.
func (s *Source) Files() []string { return append([]string(nil), s.files...) }

// Path returns the path or pattern the source was created with.
func (s *Source) Path() string { return s.path }

func hidden(name string) bool {
	return strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".")
}

func resolve(path string) ([]string, error) {
	var candidates []string
	if strings.ContainsAny(path, "*?[") {
		matches, err := filepath.Glob(path)
		if err != nil {
			return nil, fmt.Errorf("parquet source %q: bad glob pattern: %w", path, err)
		}
		for _, m := range matches {
			if hidden(filepath.Base(m)) {
				continue
			}
			candidates = append(candidates, m)
		}
	} else {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("parquet source %q: %w", path, err)
		}
		candidates = []string{path}
	}

	seen := make(map[string]bool)
	var files []string
	for _, c := range candidates {
		st, err := os.Stat(c)
		if err != nil {
			return nil, fmt.Errorf("parquet source %q: %w", path, err)
		}
		if !st.IsDir() {
			c = filepath.Clean(c)
			if !seen[c] {
				seen[c] = true
				files = append(files, c)
			}
			continue
		}
		err = filepath.WalkDir(c, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != c && hidden(d.Name()) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() || !strings.HasSuffix(strings.ToLower(d.Name()), ".parquet") {
				return nil
			}
			p = filepath.Clean(p)
			if !seen[p] {
				seen[p] = true
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("parquet source %q: listing %s: %w", path, c, err)
		}
	}
	sort.Strings(files)
	return files, nil
}

// fingerprint identifies a file version cheaply; a resumed run compares it
// to detect a file rewritten after planning.
type fingerprint struct {
	Size    int64 `json:"size"`
	MTimeNS int64 `json:"mtime_ns"`
	// ETag is an object's entity tag (empty on disk).
	ETag string `json:"etag,omitempty"`
}

func statFingerprint(path string) (fingerprint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fingerprint{}, err
	}
	if st.IsDir() {
		return fingerprint{}, fmt.Errorf("%s is a directory", path)
	}
	return fingerprint{Size: st.Size(), MTimeNS: st.ModTime().UnixNano()}, nil
}

// readerProps are the file readers' properties. Their allocator serves the
// page readers' compressed, decompressed and dictionary page buffers, which
// arrow-go fills before it reads them, reuses in place from page to page
// and never hands to a caller, so they come from the pool (unzeroed) and
// serve the next shard. Decoded arrays use pqarrow's allocator (newReader):
// pooled only for numeric columns a caller lets us reuse
// (ReadOptions.Reuse), since callers keep strings that alias theirs.
func readerProps() *pq.ReaderProperties {
	props := pq.NewReaderProperties(bufpool.Default.Unzeroed())
	props.BufferedStreamEnabled = true
	props.BufferSize = streamBufferSize
	return props
}

// openedFile is an open Parquet file with its parsed footer.
type openedFile struct {
	rdr *file.Reader
	// ranged is the object reader of a file on object storage, told which
	// column chunks a shard will read.
	ranged *objstore.RangeReader
	// props are rdr's read properties; a shard reader may turn the
	// buffered stream off before it opens column readers (wholeChunks).
	props *pq.ReaderProperties
	// zeroRows is set when the footer said 0 rows but its row groups hold
	// some: the count was corrected (fixZeroRowCount).
	zeroRows bool
}

func (o *openedFile) Close() error {
	return o.rdr.Close() // closes the file or object reader too
}

// input is what a Parquet file is read through: an *os.File or an
// objstore.RangeReader.
type input interface {
	pq.ReaderAtSeeker
	Close() error
}

// openAny opens a file of the source, on disk or on object storage, and
// returns it with its fingerprint; planned is the fingerprint a plan
// recorded (nil when planning).
func (s *Source) openAny(ctx context.Context, path string, planned *fingerprint) (*openedFile, fingerprint, error) {
	if s.bucket != nil {
		return s.openObject(ctx, path, planned)
	}
	fp, err := statFingerprint(path)
	if err != nil {
		return nil, fingerprint{}, err
	}
	of, err := openFile(path)
	return of, fp, err
}

// openFile opens path and parses its footer. Decoder panics on corrupt
// footers become errors naming the file. A footer that fails to parse only
// because a column carries a logical type newer than arrow-go knows is read
// again without those annotations (footerWithoutUnknownLogicalTypes): the
// columns are then read by their physical types, with a warning.
func openFile(path string) (of *openedFile, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	of, err = parseFile(path, f, st.Size())
	if err != nil {
		f.Close()
	}
	return of, err
}

// parseFile parses the footer of f, of size bytes, named path in errors
// and warnings. The caller closes f on error.
func parseFile(path string, f input, size int64) (*openedFile, error) {
	props := readerProps()
	rdr, err := newParquetReader(f, file.WithReadProps(props))
	if err == nil {
		return &openedFile{rdr: rdr, props: props, zeroRows: fixZeroRowCount(rdr.MetaData())}, nil
	}
	md, cols, ferr := footerWithoutUnknownLogicalTypes(f, size)
	if ferr != nil || len(cols) == 0 {
		return nil, err
	}
	rdr, err = newParquetReader(f, file.WithReadProps(props), file.WithMetadata(md))
	if err != nil {
		return nil, err
	}
	warnUnknownLogicalTypes(path, cols)
	return &openedFile{rdr: rdr, props: props, zeroRows: fixZeroRowCount(rdr.MetaData())}, nil
}

// fixZeroRowCount sets the file's row count to its row groups' total when
// the footer says 0 but the row groups hold rows, and reports whether it
// did. Early writers (parquet-rs before 0.4 among them) left the count at
// zero; the row groups are what is read and what other readers (DuckDB,
// Arrow C++) count, and arrow-go's seek checks row indexes against the
// file's count.
func fixZeroRowCount(md *metadata.FileMetaData) bool {
	if md.NumRows != 0 {
		return false
	}
	var total int64
	for i := range md.NumRowGroups() {
		n := md.RowGroup(i).NumRows()
		if n < 0 || total+n < total {
			return false // readFooter reports the bad count
		}
		total += n
	}
	if total == 0 {
		return false
	}
	md.NumRows = total
	return true
}

// newParquetReader is file.NewParquetReader with its panics turned into
// errors.
func newParquetReader(f input, opts ...file.ReadOption) (rdr *file.Reader, err error) {
	defer func() {
		if r := recover(); r != nil {
			rdr, err = nil, fmt.Errorf("corrupt parquet footer: %v", r)
		}
	}()
	return file.NewParquetReader(f, append([]file.ReadOption{file.WithReadProps(readerProps())}, opts...)...)
}

// wholeChunks reads each column chunk of row groups [first, last) in one
// read when none of them is larger than the stream buffer: the buffered
// stream would allocate as much (its buffer is the smaller of its size and
// the chunk's) and copy every page out of it once more (11% of a null-model
// job's CPU went to that copy). Larger chunks keep the stream, whose buffer
// bounds memory whatever the row group's size. Objects keep the stream:
// their ranged reader fetches the planned chunks itself.
func (of *openedFile) wholeChunks(first, last int) {
	if of.ranged != nil {
		return
	}
	md := of.rdr.MetaData()
	for rg := first; rg < last; rg++ {
		g := md.RowGroup(rg)
		for c := range g.NumColumns() {
			cc, err := g.ColumnChunk(c)
			if err != nil || cc.TotalCompressedSize() > streamBufferSize || cc.TotalCompressedSize() < 0 {
				return
			}
		}
	}
	of.props.BufferedStreamEnabled = false
}

// warnedLogicalTypes remembers the files warned about, so that a file read
// shard by shard is reported once per process, not once per shard.
var warnedLogicalTypes sync.Map

// warnedZeroRows remembers the files whose zero row count was warned about
// (Schema and Plan both read every footer).
var warnedZeroRows sync.Map

func warnUnknownLogicalTypes(path string, cols []string) {
	if _, dup := warnedLogicalTypes.LoadOrStore(path, true); dup {
		return
	}
	for _, c := range cols {
		slog.Warn("parquet column has a logical type this reader does not know; reading it by its physical type", "file", path, "column", c)
	}
}

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

func arrowSchema(md *metadata.FileMetaData) (*arrow.Schema, error) {
	sc, err := pqarrow.FromParquet(md.Schema, &pqarrow.ArrowReadProperties{}, md.KeyValueMetadata())
	if err != nil {
		return nil, badColumn(md, err)
	}
	fields := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		f.Type = outputType(f.Type)
		fields[i] = f
	}
	return arrow.NewSchema(fields, nil), nil
}

// badColumn names the top-level column whose schema pqarrow cannot
// convert (its errors name none), by converting the columns one at a time.
// It runs only on the error path: the single-column schemas it builds
// re-parent the file schema's nodes.
func badColumn(md *metadata.FileMetaData, err error) error {
	root := md.Schema.Root()
	for i := range root.NumFields() {
		f := root.Field(i)
		g, gerr := schema.NewGroupNode(root.Name(), root.RepetitionType(), schema.FieldList{f}, -1)
		if gerr != nil {
			continue
		}
		if _, ferr := pqarrow.FromParquet(schema.NewSchema(g), &pqarrow.ArrowReadProperties{}, nil); ferr != nil {
			return fmt.Errorf("column %q: %w", f.Name(), err)
		}
	}
	return err
}

// outputType is the Arrow type a column is delivered as: binary columns
// become strings (same memory layout, so the conversion is free), and string
// dictionaries (restored from an Arrow schema stored in the file, e.g. a
// pandas category column) are decoded, so that downstream code sees one key
// type for byte-string keys.
func outputType(t arrow.DataType) arrow.DataType {
	switch t.ID() {
	case arrow.BINARY:
		return arrow.BinaryTypes.String
	case arrow.LARGE_BINARY:
		return arrow.BinaryTypes.LargeString
	case arrow.DICTIONARY:
		switch vt := outputType(t.(*arrow.DictionaryType).ValueType); vt.ID() {
		case arrow.STRING, arrow.LARGE_STRING:
			return vt
		}
	}
	return t
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

// Schema returns the Arrow schema of the first file, after checking that
// every other file has the same columns with the same types (column order
// and nullability may differ). Binary columns are reported as strings, as
// Open delivers them.
func (s *Source) Schema(ctx context.Context) (*arrow.Schema, error) {
	fts, err := s.readFooters(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkCompatible(s.files, fts); err != nil {
		return nil, err
	}
	return fts[0].schema, nil
}

func checkCompatible(files []string, fts []footer) error {
	first := fts[0].schema
	for i := 1; i < len(fts); i++ {
		sc := fts[i].schema
		for _, f := range first.Fields() {
			idx := sc.FieldIndices(f.Name)
			if len(idx) == 0 {
				return fmt.Errorf("parquet source: column %q of %s is missing from %s", f.Name, files[0], files[i])
			}
			g := sc.Field(idx[0])
			if !arrow.TypeEqual(f.Type, g.Type) {
				return fmt.Errorf("parquet source: column %q is %s in %s but %s in %s", f.Name, f.Type, files[0], g.Type, files[i])
			}
		}
		for _, g := range sc.Fields() {
			if !first.HasField(g.Name) {
				return fmt.Errorf("parquet source: column %q of %s is missing from %s", g.Name, files[i], files[0])
			}
		}
	}
	return nil
}

// shardPlan is the JSON plan of one shard: Rows rows of File starting at row
// Offset of row group FirstRowGroup and spanning NumRowGroups row groups.
type shardPlan struct {
	File          string `json:"file"`
	Size          int64  `json:"size"`
	MTimeNS       int64  `json:"mtime_ns"`
	ETag          string `json:"etag,omitempty"`
	FirstRowGroup int    `json:"first_row_group"`
	NumRowGroups  int    `json:"num_row_groups"`
	Offset        int64  `json:"offset"`
	Rows          int64  `json:"rows"`
}

// Plan splits the dataset into shards of at most rowsPerShard rows from the
// file footers alone. Whole row groups of one file are packed together; a row
// group larger than rowsPerShard is split into near-equal row ranges. A
// dataset of zero-row files plans zero shards.
func (s *Source) Plan(ctx context.Context, rowsPerShard int64) ([]sources.ShardPlan, error) {
	if rowsPerShard <= 0 {
		return nil, fmt.Errorf("parquet source %q: rows per shard must be positive, got %d", s.path, rowsPerShard)
	}
	fts, err := s.readFooters(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkCompatible(s.files, fts); err != nil {
		return nil, err
	}
	var out []sources.ShardPlan
	var count int64
	for i, ft := range fts {
		for _, n := range ft.rowGroups {
			count += (n + rowsPerShard - 1) / rowsPerShard
		}
		if count > maxShards {
			return nil, fmt.Errorf("parquet source %q: more than %d shards of %d rows (at %s); raise rows_per_shard", s.path, maxShards, rowsPerShard, s.files[i])
		}
	}
	for i, ft := range fts {
		for _, sp := range planFile(s.files[i], ft, rowsPerShard) {
			raw, err := json.Marshal(sp)
			if err != nil {
				return nil, fmt.Errorf("parquet source: encoding plan for %s: %w", sp.File, err)
			}
			out = append(out, sources.ShardPlan{Plan: raw, Rows: sp.Rows, Desc: sp.desc(ft.rowGroups)})
		}
	}
	return out, nil
}

func planFile(path string, ft footer, rowsPerShard int64) []shardPlan {
	var out []shardPlan
	base := shardPlan{File: path, Size: ft.fp.Size, MTimeNS: ft.fp.MTimeNS, ETag: ft.fp.ETag}
	cur := base
	cur.FirstRowGroup = -1
	flush := func() {
		if cur.FirstRowGroup >= 0 && cur.Rows > 0 {
			out = append(out, cur)
		}
		cur = base
		cur.FirstRowGroup = -1
	}
	for rg, n := range ft.rowGroups {
		switch {
		case n == 0:
			// Nothing to read; an open run of groups may continue past it.
			if cur.FirstRowGroup >= 0 {
				cur.NumRowGroups++
			}
		case n > rowsPerShard:
			flush()
			pieces := (n + rowsPerShard - 1) / rowsPerShard
			var off int64
			for p := int64(0); p < pieces; p++ {
				size := n / pieces
				if p < n%pieces {
					size++
				}
				sp := base
				sp.FirstRowGroup, sp.NumRowGroups, sp.Offset, sp.Rows = rg, 1, off, size
				out = append(out, sp)
				off += size
			}
		default:
			if cur.FirstRowGroup >= 0 && cur.Rows+n > rowsPerShard {
				flush()
			}
			if cur.FirstRowGroup < 0 {
				cur.FirstRowGroup = rg
			}
			cur.NumRowGroups++
			cur.Rows += n
		}
	}
	flush()
	return out
}

// desc is the human description: "path rows a..b (row groups i..j)".
func (sp shardPlan) desc(rowGroups []int64) string {
	var start int64
	for i := 0; i < sp.FirstRowGroup && i < len(rowGroups); i++ {
		start += rowGroups[i]
	}
	start += sp.Offset
	last := sp.FirstRowGroup + sp.NumRowGroups - 1
	if last == sp.FirstRowGroup {
		return fmt.Sprintf("%s rows %d..%d (row group %d)", sp.File, start, start+sp.Rows, sp.FirstRowGroup)
	}
	return fmt.Sprintf("%s rows %d..%d (row groups %d..%d)", sp.File, start, start+sp.Rows, sp.FirstRowGroup, last)
}
