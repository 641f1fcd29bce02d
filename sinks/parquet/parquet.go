// Package parquet is the Parquet sink: one file per shard under the job's
// output directory, published by swapping a staging directory into place.
//
// Layout, for path out/recs/date=2024-11-01 and run version V:
//
//	out/recs/.date=2024-11-01.precog-V/              staging (hidden, same filesystem)
//	    part-00003.parquet.tmp-1f2e…                 an attempt being written
//	    part-00003.parquet                           a committed shard
//	out/recs/date=2024-11-01/                        the published run
//	    part-00000.parquet … _SUCCESS
//
// A shard's Commit fsyncs its temporary file and renames it over
// part-<i>.parquet, so a retried shard replaces its earlier attempt. Publish
// writes _SUCCESS into staging and swaps it with the published directory in
// one atomic rename (renameat2 RENAME_EXCHANGE on Linux; two renames where
// the filesystem lacks it), so a reader that resolves the directory sees the
// old run or the new one, never a mix. A re-run replaces the directory's
// contents.
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
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

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
	spec  jobs.ParquetSinkSpec
	codec compress.Compression
	// RowGroupRows and RowGroupBytes bound a row group (and so a shard
	// writer's buffered memory); New sets the defaults.
	RowGroupRows  int64
	RowGroupBytes int64
}

var _ sinks.Sink = (*Sink)(nil)

// New checks spec and returns a sink. Path may still hold {{.param}}
// templates; they are rendered with each run's parameters.
func New(spec jobs.ParquetSinkSpec) (*Sink, error) {
	if strings.TrimSpace(spec.Path) == "" {
		return nil, errors.New("sinks.parquet.path: empty")
	}
	if strings.Contains(spec.Path, "{{") {
		if _, err := template.New("path").Option("missingkey=error").Parse(spec.Path); err != nil {
			return nil, fmt.Errorf("sinks.parquet.path %q: %w", spec.Path, err)
		}
	}
	var codec compress.Compression
	switch strings.ToLower(spec.Compression) {
	case "zstd":
		codec = compress.Codecs.Zstd
	case "", "snappy":
		// The default: every reader has it, and it costs a fraction of
		// zstd's CPU (zstd took 19% of a recs job's CPU on 2 cores).
		codec = compress.Codecs.Snappy
	case "gzip":
		codec = compress.Codecs.Gzip
	case "none", "uncompressed":
		codec = compress.Codecs.Uncompressed
	default:
		return nil, fmt.Errorf("sinks.parquet.compression: %q is not one of zstd, snappy, gzip, none", spec.Compression)
	}
	return &Sink{spec: spec, codec: codec, RowGroupRows: DefaultRowGroupRows, RowGroupBytes: DefaultRowGroupBytes}, nil
}

// Name is "parquet".
func (s *Sink) Name() string { return "parquet" }

// Close releases nothing: the sink holds no connections.
func (s *Sink) Close() error { return nil }

// dirs are the directories one run works with.
type dirs struct {
	target  string // the published directory
	parent  string
	staging string // .<base>.precog-<version>
	old     string // .<base>.precog-old-<version>, only without RENAME_EXCHANGE
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
	if v == "" || v == "." || v == ".." || strings.ContainsAny(v, `/\`+"\x00") {
		return dirs{}, fmt.Errorf("parquet: run %s: version %q cannot name a directory", run.RunID, v)
	}
	t, err := s.Target(run)
	if err != nil {
		return dirs{}, err
	}
	parent, base := filepath.Dir(t), filepath.Base(t)
	return dirs{
		target:  t,
		parent:  parent,
		staging: filepath.Join(parent, "."+base+".precog-"+v),
		old:     filepath.Join(parent, "."+base+".precog-old-"+v),
	}, nil
}

// Prepare creates the run's staging directory (keeping shards an earlier
// process committed there, which is what makes a resume cheap).
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
	if succ, err := ReadSuccess(d.target); err == nil && succ.Version == run.Version {
		return nil // already published
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
	final := filepath.Join(d.staging, fmt.Sprintf("part-%05d.parquet", index))
	tmp := final + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("parquet: shard %d: %w", index, err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	// Dictionaries pay only for repetitive strings (model_version, params);
	// on keys and model outputs they cost 4x the write throughput.
	opts := []parquet.WriterProperty{
		parquet.WithCompression(s.codec),
		parquet.WithMaxRowGroupLength(s.RowGroupRows),
		parquet.WithCreatedBy("precog"),
		parquet.WithDictionaryDefault(false),
	}
	for _, f := range run.Schema.Fields() {
		if f.Type.ID() == arrow.STRING && f.Name != run.Key {
			opts = append(opts, parquet.WithDictionaryFor(f.Name, true))
		}
	}
	props := parquet.NewWriterProperties(opts...)
	fw, err := pqarrow.NewFileWriter(run.Schema, plainWriter{bw}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
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
	return &shardWriter{sink: s, run: run, index: index, f: f, bw: bw, fw: fw, tmp: tmp, final: final, dir: d.staging}, nil
}

// exchangeDirs swaps two directories atomically; a variable so tests can
// simulate filesystems without RENAME_EXCHANGE and crashes mid-publish.
var exchangeDirs = exchange

// plainWriter hides the file's Close from pqarrow, which would otherwise
// close it before Commit can flush and fsync.
type plainWriter struct{ w *bufio.Writer }

func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }

type shardWriter struct {
	sink  *Sink
	run   sinks.RunInfo
	index int
	f     *os.File
	bw    *bufio.Writer
	fw    *pqarrow.FileWriter
	tmp   string
	final string
	dir   string
	rows  int64
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
	err := w.fw.WriteBuffered(rec)
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
	fail := func(what string, err error) error {
		w.f.Close()
		os.Remove(w.tmp)
		return fmt.Errorf("parquet: shard %d: %s %s: %w", w.index, what, w.tmp, err)
	}
	if err := ctx.Err(); err != nil {
		return fail("commit", err)
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
	w.f.Close()
	if err := os.Remove(w.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("parquet: shard %d: abort: %w", w.index, err)
	}
	return nil
}

// Publish marks staging with _SUCCESS and swaps it into place. Called again
// after a crash at any point, it finishes the job: a target already holding
// the run's version means the swap happened, and what is left in staging is
// the previous run, to be removed.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if succ, err := ReadSuccess(d.target); err == nil && succ.Version == run.Version {
		if err := removeAll(d.staging, d.old); err != nil {
			return fmt.Errorf("parquet: publish %s: clean up: %w", d.target, err)
		}
		return nil
	}
	if _, err := os.Stat(d.staging); err != nil {
		return fmt.Errorf("parquet: publish run %s to %s: staging dir: %w", run.RunID, d.target, err)
	}
	if err := removeTemps(d.staging); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	succ, err := json.Marshal(Success{Job: run.Job, RunID: run.RunID, Version: run.Version, PublishedAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	if err := writeFileSync(filepath.Join(d.staging, SuccessFile), succ); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	if err := syncDir(d.staging); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	_, statErr := os.Stat(d.target)
	switch {
	case statErr == nil:
		err := exchangeDirs(d.staging, d.target)
		if err == nil {
			// staging now holds the previous run.
			if err := syncDir(d.parent); err != nil {
				return fmt.Errorf("parquet: publish %s: %w", d.target, err)
			}
			if err := os.RemoveAll(d.staging); err != nil {
				slog.Warn("parquet: previous run left behind", "dir", d.staging, "err", err)
			}
			return nil
		}
		if !errors.Is(err, errNoExchange) {
			return fmt.Errorf("parquet: publish %s: swap with %s: %w", d.target, d.staging, err)
		}
		// Two renames: readers may briefly find no directory, never a mix.
		if err := os.RemoveAll(d.old); err != nil {
			return fmt.Errorf("parquet: publish %s: %w", d.target, err)
		}
		if err := os.Rename(d.target, d.old); err != nil {
			return fmt.Errorf("parquet: publish %s: move previous run aside: %w", d.target, err)
		}
	case !errors.Is(statErr, fs.ErrNotExist):
		return fmt.Errorf("parquet: publish: %w", statErr)
	}
	if err := os.Rename(d.staging, d.target); err != nil {
		return fmt.Errorf("parquet: publish %s: rename %s: %w", d.target, d.staging, err)
	}
	if err := syncDir(d.parent); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	if err := os.RemoveAll(d.old); err != nil {
		slog.Warn("parquet: previous run left behind", "dir", d.old, "err", err)
	}
	return nil
}

// Abort removes the run's staging directory; a published run is untouched.
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(d.staging); err != nil {
		return fmt.Errorf("parquet: abort run %s: %w", run.RunID, err)
	}
	return nil
}

// removeTemps deletes abandoned attempts' temporary files from staging so
// they are not published.
func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func removeAll(paths ...string) error {
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
