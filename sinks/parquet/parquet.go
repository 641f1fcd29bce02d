// Package parquet is the Parquet sink: one file per shard under the job's
// output directory, published by swapping a staging directory into place.
//
// Layout, for path out/recs/date=2024-11-01 and run version V:
//
//	out/recs/.date=2024-11-01.precog.lock/          the writer lease (lock.go)
//	out/recs/.date=2024-11-01.precog-V/              staging (hidden, same filesystem)
//	    part-00003.parquet.tmp-1f2e…                 an attempt being written
//	    part-00003.parquet                           a committed shard
//	out/recs/date=2024-11-01/                        the published run
//	    part-00000.parquet … _SUCCESS _PRECOG
//	out/recs/.date=2024-11-01.precog.versions/U/     an earlier published run, kept for rollback (versions.go)
//
// A shard's Commit fsyncs its temporary file and renames it over
// part-<i>.parquet, so a retried shard replaces its earlier attempt. Stage
// (stage.go) verifies the committed shards and writes _SUCCESS and the
// _PRECOG ownership marker into staging; Publish (publish.go) swaps staging
// with the published directory in one atomic rename, so a reader that
// resolves the directory sees the old run or the new one, never a mix;
// the run it replaced is kept beside it while retention (retain) keeps it.
//
// Precog replaces only a directory it published for the same job, and
// deletes only the file names it writes (owner.go): a directory holding
// anything else is refused with a *sinks.NotOwnedError and left untouched.
package parquet

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/internal/bufpool"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// SuccessFile marks a published run directory; it holds a Success as JSON.
const SuccessFile = "_SUCCESS"

// Bounds of one row group: a writer buffers at most one row group, so they
// bound a shard writer's memory whatever the shard's size.
const (
	DefaultRowGroupRows  = 128 * 1024
	DefaultRowGroupBytes = 64 << 20
)

// DataPageBytes bounds a data page before compression (arrow-go's default is
// 1 MiB) in a file of flat columns. The writer grows its encoding buffer,
// copies the page into a second buffer and compresses it into a third, each
// of a page's size and fresh per column per shard; at 64 KiB they are reused
// warm from cache (a 2M-row null-model job: 36k -> 31k page faults, 0.57 ->
// 0.52-0.55 CPU-s; the bench's feed row 0.72-0.82 -> 0.94 of DuckDB). A
// reader sees the same values and types in more pages.
const DataPageBytes = 64 << 10

// NestedDataPageBytes bounds a data page in a file with a list column
// (embeddings, top-k lists): there small pages cost more than they save, as
// arrow-go pays per page for a nested column's levels and statistics (the
// bench's text job, 100k rows of 384 floats: the write stage 1.69 s at
// 64 KiB pages, 0.66-0.72 s at 1 MiB).
const NestedDataPageBytes = 1 << 20

// pageBytes is the data page bound for a file of schema's columns.
func pageBytes(schema *arrow.Schema) int64 {
	for _, f := range schema.Fields() {
		if _, nested := f.Type.(arrow.NestedType); nested {
			return NestedDataPageBytes
		}
	}
	return DataPageBytes
}

// writeBuffer is the file's write buffer: the column chunks, written whole
// when a row group closes, bypass it, so it holds only headers and the
// footer.
const writeBuffer = 64 << 10

// Success is the content of _SUCCESS: which run the directory holds.
type Success struct {
	Job         string    `json:"job"`
	RunID       string    `json:"run_id"`
	Version     string    `json:"version"`
	PublishedAt time.Time `json:"published_at"`
}

// Sink writes one job's Parquet output. Safe for concurrent use: shards of a
// run may be written in parallel.
type Sink struct {
	job   string
	spec  jobs.ParquetSinkSpec
	codec compress.Compression
	// RowGroupRows and RowGroupBytes bound a row group (and so a shard
	// writer's buffered memory); New sets the defaults.
	RowGroupRows  int64
	RowGroupBytes int64
	// retain is how many published versions the target keeps, the current
	// one included (spec.Retain, defaulted by jobs.ParquetSinkSpec.Normalize).
	retain int
	// lease is the writer lease when the holder names none.
	lease time.Duration

	mu   sync.Mutex
	held map[string]*leaseLock // by target: the leases this Sink holds
}

var (
	_ sinks.Sink       = (*Sink)(nil)
	_ sinks.Rollbacker = (*Sink)(nil)
)

// New checks spec and returns the sink of job (whose name Check looks for
// in the target's ownership marker). Path may still hold {{.param}}
// templates; they are rendered with each run's parameters.
func New(job string, spec jobs.ParquetSinkSpec) (*Sink, error) {
	if strings.TrimSpace(spec.Path) == "" {
		return nil, errors.New("sinks.parquet.path: empty")
	}
	if strings.Contains(spec.Path, "{{") {
		if _, err := template.New("path").Option("missingkey=error").Parse(spec.Path); err != nil {
			return nil, fmt.Errorf("sinks.parquet.path %q: %w", spec.Path, err)
		}
	}
	spec.Normalize(nil) // jobs owns the defaults (compression, retain)
	var codec compress.Compression
	switch spec.Compression {
	case jobs.CompressionZstd:
		codec = compress.Codecs.Zstd
	case jobs.CompressionSnappy:
		codec = compress.Codecs.Snappy
	case jobs.CompressionGzip:
		codec = compress.Codecs.Gzip
	case jobs.CompressionNone:
		codec = compress.Codecs.Uncompressed
	default:
		return nil, fmt.Errorf("sinks.parquet.compression: %q is not one of zstd, snappy, gzip, none", spec.Compression)
	}
	if spec.Retain < 0 {
		return nil, fmt.Errorf("sinks.parquet.retain: must be >= 1 (got %d)", spec.Retain)
	}
	return &Sink{job: job, spec: spec, codec: codec, RowGroupRows: DefaultRowGroupRows, RowGroupBytes: DefaultRowGroupBytes,
		retain: spec.Retain, lease: sinks.DefaultLockLease, held: map[string]*leaseLock{}}, nil
}

// Name is "parquet".
func (s *Sink) Name() string { return "parquet" }

// Close releases nothing: the sink holds no connections.
func (s *Sink) Close() error { return nil }

// dirs are the directories one run works with.
type dirs struct {
	target   string // the published directory
	parent   string
	staging  string // .<base>.precog-<version>
	old      string // .<base>.precog-old-<version>, only without RENAME_EXCHANGE
	versions string // .<base>.precog.versions: earlier published versions, one directory each
}

// Target returns the published directory of run: the spec's path rendered
// with the run's parameters.
func (s *Sink) Target(run sinks.RunInfo) (string, error) {
	p := s.spec.Path
	if strings.Contains(p, "{{") {
		tmpl, err := template.New("path").Option("missingkey=error").Parse(p)
		if err != nil {
			return "", fmt.Errorf("sinks.parquet.path %q: %w", p, err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, run.Params); err != nil {
			return "", fmt.Errorf("sinks.parquet.path %q: %w", p, err)
		}
		p = b.String()
	}
	p = filepath.Clean(p)
	if b := filepath.Base(p); b == "." || b == ".." || b == string(filepath.Separator) {
		return "", fmt.Errorf("sinks.parquet.path %q: not a directory name a run can replace", p)
	}
	return p, nil
}

func (s *Sink) dirs(run sinks.RunInfo) (dirs, error) {
	v := run.Version
	if err := jobs.Version(v).Validate(); err != nil {
		return dirs{}, fmt.Errorf("parquet: run %s: %w", run.RunID, err)
	}
	t, err := s.Target(run)
	if err != nil {
		return dirs{}, err
	}
	parent, base := filepath.Dir(t), filepath.Base(t)
	return dirs{
		target:   t,
		parent:   parent,
		staging:  filepath.Join(parent, "."+base+".precog-"+v),
		old:      filepath.Join(parent, "."+base+".precog-old-"+v),
		versions: versionsDir(t),
	}, nil
}

// Prepare checks that precog may replace the target (a *sinks.NotOwnedError
// otherwise, with nothing created) and creates the run's staging directory
// (keeping shards an earlier process committed there, which is what makes a
// resume cheap).
func (s *Sink) Prepare(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if run.Schema == nil {
		return fmt.Errorf("parquet: run %s: no output schema", run.RunID)
	}
	if alreadyPublished(d.target, run) {
		return nil
	}
	if err := checkOwned(d.target, run.Job); err != nil {
		return err
	}
	if err := os.MkdirAll(d.staging, 0o755); err != nil {
		return fmt.Errorf("parquet: prepare %s: %w", d.staging, err)
	}
	return nil
}

// ReadSuccess reads dir/_SUCCESS: which run a published directory holds.
// The error wraps fs.ErrNotExist when nothing is published there.
func ReadSuccess(dir string) (Success, error) {
	var succ Success
	b, err := os.ReadFile(filepath.Join(dir, SuccessFile))
	if err != nil {
		return succ, err
	}
	if err := json.Unmarshal(b, &succ); err != nil {
		return succ, fmt.Errorf("%s: %w", filepath.Join(dir, SuccessFile), err)
	}
	return succ, nil
}

// Shard starts an attempt at shard index: a temporary file in staging.
func (s *Sink) Shard(ctx context.Context, run sinks.RunInfo, index int) (sinks.ShardWriter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if index < 0 {
		return nil, fmt.Errorf("parquet: shard index %d is negative", index)
	}
	if run.Schema == nil {
		return nil, fmt.Errorf("parquet: run %s: no output schema", run.RunID)
	}
	d, err := s.dirs(run)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.staging, 0o755); err != nil {
		return nil, fmt.Errorf("parquet: shard %d: %w", index, err)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("parquet: shard %d: random name: %w", index, err)
	}
	final := filepath.Join(d.staging, partName(index))
	tmp := final + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("parquet: shard %d: %w", index, err)
	}
	bw := bufio.NewWriterSize(f, writeBuffer)
	// Dictionaries pay only for repetitive strings (model_version, params);
	// on keys and model outputs they cost 4x the write throughput.
	opts := []parquet.WriterProperty{
		parquet.WithCompression(s.codec),
		parquet.WithMaxRowGroupLength(s.RowGroupRows),
		parquet.WithCreatedBy("precog"),
		parquet.WithDictionaryDefault(false),
		parquet.WithDataPageSize(pageBytes(run.Schema)),
		// Page and column buffers come back to the pool at Commit and
		// serve the next shard (bufpool: no fresh heap per shard).
		parquet.WithAllocator(bufpool.Default),
	}
	var dictCols []int
	for i, f := range run.Schema.Fields() {
		if f.Type.ID() == arrow.STRING && f.Name != run.Key {
			opts = append(opts, parquet.WithDictionaryFor(f.Name, true))
			dictCols = append(dictCols, i)
		}
	}
	props := parquet.NewWriterProperties(opts...)
	fw, err := pqarrow.NewFileWriter(run.Schema, plainWriter{bw}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(bufpool.Default)))
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("parquet: shard %d: schema %s: %w", index, run.Schema, err)
	}
	for k, v := range map[string]string{"precog.job": run.Job, "precog.run_id": run.RunID, "precog.version": run.Version} {
		if err := fw.AppendKeyValueMetadata(k, v); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("parquet: shard %d: metadata: %w", index, err)
		}
	}
	return &shardWriter{sink: s, run: run, index: index, f: f, bw: bw, fw: fw, tmp: tmp, final: final, dir: d.staging, target: d.target,
		consts: newConstStrings(dictCols)}, nil
}

// exchangeDirs swaps two directories atomically; a variable so tests can
// simulate filesystems without RENAME_EXCHANGE and crashes mid-publish.
var exchangeDirs = exchange

// plainWriter hides the file's Close from pqarrow, which would otherwise
// close it before Commit can flush and fsync.
type plainWriter struct{ w *bufio.Writer }

func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }

type shardWriter struct {
	sink   *Sink
	run    sinks.RunInfo
	index  int
	f      *os.File
	bw     *bufio.Writer
	fw     *pqarrow.FileWriter
	tmp    string
	final  string
	dir    string
	target string
	consts *constStrings
	rows   int64
	// rgBytes is the Arrow size of the rows in the buffered row group.
	rgBytes int64
	done    bool
}

// Write appends batch to the current row group, starting a new one when the
// buffered one reaches its byte bound.
func (w *shardWriter) Write(ctx context.Context, batch arrow.RecordBatch) error {
	if w.done {
		return fmt.Errorf("parquet: shard %d: write after commit or abort", w.index)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sameFields(batch.Schema(), w.run.Schema); err != nil {
		return fmt.Errorf("parquet: shard %d: batch at row %d: %w", w.index, w.rows, err)
	}
	// Re-label with the run's schema so metadata differences don't matter.
	rec := array.NewRecordBatch(w.run.Schema, batch.Columns(), batch.NumRows())
	cols, release := w.consts.columns(batch)
	err := w.fw.WriteBuffered(relabeled{RecordBatch: rec, cols: cols})
	release()
	rec.Release()
	if err != nil {
		return fmt.Errorf("parquet: shard %d: write rows %d..%d to %s: %w", w.index, w.rows, w.rows+batch.NumRows(), w.tmp, err)
	}
	w.rows += batch.NumRows()
	// The buffered row group holds encoded pages; the Arrow size of what
	// went into it bounds them (encoding and compression only shrink data).
	if n, _ := w.fw.RowGroupNumRows(); int64(n) < batch.NumRows() {
		w.rgBytes = 0 // the row bound started a new group inside this batch
	}
	w.rgBytes += recordBytes(batch)
	if max(w.rgBytes, w.fw.RowGroupTotalBytesWritten()) >= w.sink.RowGroupBytes {
		if err := w.fw.NewBufferedRowGroupChecked(); err != nil {
			return fmt.Errorf("parquet: shard %d: new row group in %s: %w", w.index, w.tmp, err)
		}
		w.rgBytes = 0
	}
	return nil
}

// recordBytes is the size of the buffers batch references (an upper bound
// for sliced arrays).
func recordBytes(batch arrow.RecordBatch) int64 {
	var n int64
	for _, c := range batch.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}

func sameFields(got, want *arrow.Schema) error {
	if got.NumFields() != want.NumFields() {
		return fmt.Errorf("%d columns, want %d (%s)", got.NumFields(), want.NumFields(), want)
	}
	for i := range want.NumFields() {
		g, f := got.Field(i), want.Field(i)
		if g.Name != f.Name || !arrow.TypeEqual(g.Type, f.Type) {
			return fmt.Errorf("column %d is %s %s, want %s %s", i, g.Name, g.Type, f.Name, f.Type)
		}
	}
	return nil
}

// Commit finishes the file, fsyncs it and renames it over part-<i>.parquet.
func (w *shardWriter) Commit(ctx context.Context) error {
	if w.done {
		return fmt.Errorf("parquet: shard %d: commit after commit or abort", w.index)
	}
	w.done = true
	defer w.consts.release()
	fail := func(what string, err error) error {
		w.f.Close()
		os.Remove(w.tmp)
		return fmt.Errorf("parquet: shard %d: %s %s: %w", w.index, what, w.tmp, err)
	}
	if err := ctx.Err(); err != nil {
		return fail("commit", err)
	}
	if err := w.sink.fence(w.target, w.run); err != nil {
		w.f.Close() // another writer owns the target: our file stays as it is
		return fmt.Errorf("parquet: shard %d: not committed: %w", w.index, err)
	}
	if err := w.fw.Close(); err != nil {
		return fail("finish", err)
	}
	if err := w.bw.Flush(); err != nil {
		return fail("write", err)
	}
	if err := w.f.Sync(); err != nil {
		return fail("fsync", err)
	}
	if err := w.f.Close(); err != nil {
		return fail("close", err)
	}
	if err := w.sink.fence(w.target, w.run); err != nil {
		// Another writer owns the target: not even our own file is touched.
		return fmt.Errorf("parquet: shard %d: not committed: %w", w.index, err)
	}
	if err := os.Rename(w.tmp, w.final); err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("parquet: shard %d: rename %s: %w", w.index, w.tmp, err)
	}
	if err := syncDir(w.dir); err != nil {
		return fmt.Errorf("parquet: shard %d: %w", w.index, err)
	}
	return nil
}

// Abort drops the temporary file; an earlier committed attempt stays.
func (w *shardWriter) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.consts.release()
	w.f.Close()
	if err := os.Remove(w.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("parquet: shard %d: abort: %w", w.index, err)
	}
	return nil
}
