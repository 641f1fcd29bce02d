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
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/precog-ml/precog/internal/bufpool"
	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/sources"
)

// streamBufferSize is the read buffer per column chunk: arrow-go's page
// header peek (16 KiB, which it would grow a smaller buffer to). A page's
// bytes past what the peek buffered are read straight into the page
// reader's pooled buffer, so a shard allocates 16 KiB per column and
// copies at most that much of each page twice, whatever the row group's
// size. A larger buffer copied every page out of itself once more, and
// reading small chunks whole allocated each one afresh (make, zeroed):
// over 2M rows of 17 columns, 147 MB allocated and 110 CPU-ms against
// 18 MB and 77 CPU-ms with this buffer.
const streamBufferSize = 16 << 10

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
		return &openedFile{rdr: rdr, zeroRows: fixZeroRowCount(rdr.MetaData())}, nil
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
	return &openedFile{rdr: rdr, zeroRows: fixZeroRowCount(rdr.MetaData())}, nil
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

// warnedLogicalTypes remembers the files warned about, so that a file read
// shard by shard is reported once per process, not once per shard.
var warnedLogicalTypes sync.Map

func warnUnknownLogicalTypes(path string, cols []string) {
	if _, dup := warnedLogicalTypes.LoadOrStore(path, true); dup {
		return
	}
	for _, c := range cols {
		slog.Warn("parquet column has a logical type this reader does not know; reading it by its physical type", "file", path, "column", c)
	}
}
