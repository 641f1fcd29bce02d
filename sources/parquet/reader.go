package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/internal/bufpool"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

// minReadRows is the least number of rows decoded per column at a time.
// Small requested batches are cut as zero-copy slices from reads of this
// size, which amortizes the decoder's per-read cost (2.5x the throughput of
// reading 1024 rows at a time). 8192 float32 values are 32 KiB, still a
// small allocation for the Go allocator.
const minReadRows = 8192

// Open streams one planned shard: the requested columns (all when
// opts.Columns is nil, in file order), in record batches of opts.BatchSize
// rows (the shard's last batch may be shorter). Batches smaller than
// minReadRows are zero-copy slices of a larger decoded batch, so their arrays
// can have a non-zero Offset: read values through the array accessors
// (Float32Values, ValueOffsets, Offset for fixed-size lists), not raw buffers.
// Binary columns arrive as strings; nulls are kept as Arrow nulls.
// It fails, naming the file, when the plan is malformed, the file changed
// size or modification time since planning, or a column is missing.
func (s *Source) Open(ctx context.Context, plan json.RawMessage, opts sources.ReadOptions) (sources.BatchReader, error) {
	sp, err := decodePlan(plan)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = jobs.DefaultBatchSize // ReadOptions.BatchSize zero or negative
	}

	of, fp, err := s.openAny(ctx, sp.File, &fingerprint{Size: sp.Size, MTimeNS: sp.MTimeNS, ETag: sp.ETag})
	if err != nil {
		return nil, fmt.Errorf("parquet file %s: %w", sp.File, err)
	}
	if fp.Size != sp.Size || fp.MTimeNS != sp.MTimeNS || fp.ETag != sp.ETag {
		of.Close()
		etag := ""
		if sp.ETag != fp.ETag {
			etag = fmt.Sprintf(", etag %s→%s", sp.ETag, fp.ETag)
		}
		return nil, fmt.Errorf("parquet file %s changed since the run was planned (size %d→%d, mtime %d→%d%s); start a new run",
			sp.File, sp.Size, fp.Size, sp.MTimeNS, fp.MTimeNS, etag)
	}
	// newReader owns of from here: it closes it on failure.
	r, err := newReader(ctx, of, sp, opts, batch, readRows(batch))
	if err != nil {
		return nil, fmt.Errorf("parquet file %s: %w", sp.File, err)
	}
	return r, nil
}

// readRows is the decode size for a batch size: the smallest multiple of
// batch that is at least minReadRows, so every slice but the shard's last
// has exactly batch rows.
func readRows(batch int) int {
	if batch >= minReadRows {
		return batch
	}
	return (minReadRows + batch - 1) / batch * batch
}

// decodePlan parses and sanity-checks a plan produced by Plan. Arbitrary
// bytes give an error, never a panic.
func decodePlan(plan json.RawMessage) (shardPlan, error) {
	var sp shardPlan
	if err := sources.DecodePlan(plan, &sp); err != nil {
		return sp, fmt.Errorf("parquet source: bad shard plan: %w", err)
	}
	switch {
	case sp.File == "":
		return sp, errors.New("parquet source: bad shard plan: no file")
	case sp.FirstRowGroup < 0 || sp.NumRowGroups < 1:
		return sp, fmt.Errorf("parquet source: bad shard plan for %s: row groups %d+%d", sp.File, sp.FirstRowGroup, sp.NumRowGroups)
	case sp.Offset < 0 || sp.Rows < 1:
		return sp, fmt.Errorf("parquet source: bad shard plan for %s: offset %d rows %d", sp.File, sp.Offset, sp.Rows)
	}
	return sp, nil
}

// reader implements sources.BatchReader over one shard. It drives one
// pqarrow column reader per output column itself, in the calling goroutine,
// rather than pqarrow's record reader, whose SeekToRow runs decoders on
// other goroutines where a panic on a corrupt page could not be recovered.
type reader struct {
	of   *openedFile
	plan shardPlan

	// cols[i] reads output column i; dup[i] >= 0 when output column i
	// repeats an earlier one (the same name requested twice).
	cols   []*pqarrow.ColumnReader
	dup    []int
	schema *arrow.Schema
	read   int64 // rows decoded per column at a time

	// rgStart[i] is the file row of the first row of row group i; the last
	// entry is the file's row count.
	rgStart []int64
	// next is the file row of the next row to be delivered; last is the file
	// row of row 0 of the batch returned last.
	next, last int64
	end        int64 // file row one past the shard

	// batch is the rows per returned batch; pending holds the rest of the
	// last decoded batch, from row pendingOff on.
	batch      int64
	pending    arrow.RecordBatch
	pendingOff int64

	err error
}

func newReader(ctx context.Context, of *openedFile, sp shardPlan, opts sources.ReadOptions, batch, read int) (_ *reader, err error) {
	columns := opts.Columns
	r := &reader{of: of, plan: sp, batch: int64(batch), read: int64(read)}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("opening shard: %v", p)
		}
		if err != nil {
			r.release()
		}
	}()
	md := of.rdr.MetaData()
	nrg := md.NumRowGroups()
	if sp.FirstRowGroup+sp.NumRowGroups > nrg || sp.FirstRowGroup+sp.NumRowGroups < 0 {
		return nil, fmt.Errorf("shard plan names row groups %d..%d but the file has %d", sp.FirstRowGroup, sp.FirstRowGroup+sp.NumRowGroups-1, nrg)
	}
	r.rgStart = make([]int64, nrg+1)
	for i := 0; i < nrg; i++ {
		r.rgStart[i+1] = r.rgStart[i] + md.RowGroup(i).NumRows()
	}
	first, lastRG := sp.FirstRowGroup, sp.FirstRowGroup+sp.NumRowGroups
	span := r.rgStart[lastRG] - r.rgStart[first]
	if sp.Offset > span || sp.Rows > span-sp.Offset {
		return nil, fmt.Errorf("shard plan reads rows %d+%d of row groups %d..%d, which hold %d rows", sp.Offset, sp.Rows, first, lastRG-1, span)
	}
	r.next = r.rgStart[first] + sp.Offset
	r.last, r.end = r.next, r.next+sp.Rows

	props := pqarrow.ArrowReadProperties{BatchSize: int64(read)}
	fr, err := pqarrow.NewFileReader(of.rdr, props, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	// pooled decodes the columns a caller lets us reuse (ReadOptions.Reuse)
	// into bufpool memory, which each release gives back for the next
	// batch: the decoded arrays were most of a null-model job's allocation.
	pooled := fr
	if opts.Reuse {
		if pooled, err = pqarrow.NewFileReader(of.rdr, props, bufpool.Default.Unzeroed()); err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
	}

	// Resolve the projection to top-level fields.
	fields := fr.Manifest.Fields
	var want []int // top-level field index per output column
	if columns == nil {
		for i := range fields {
			want = append(want, i)
		}
	} else {
		for _, c := range columns {
			idx := -1
			for i := range fields {
				if fields[i].Field.Name == c {
					idx = i
					break
				}
			}
			if idx < 0 {
				return nil, fmt.Errorf("column %q not found", c)
			}
			want = append(want, idx)
		}
	}
	if len(want) == 0 {
		return nil, errors.New("no columns to read")
	}
	rowGroups := make([]int, sp.NumRowGroups)
	for i := range rowGroups {
		rowGroups[i] = first + i
	}
	if of.ranged != nil {
		// Tell the object reader which column chunks this shard reads, so
		// that it fetches them ahead, several at once.
		var leaves []int
		for _, fi := range want {
			leaves = appendLeaves(leaves, &fields[fi])
		}
		ranges, err := shardRanges(md, rowGroups, leaves)
		if err != nil {
			return nil, err
		}
		of.ranged.Plan(ranges)
	}
	out := make([]arrow.Field, len(want))
	r.cols = make([]*pqarrow.ColumnReader, len(want))
	r.dup = make([]int, len(want))
	seen := make(map[int]int)
	for i, fi := range want {
		if j, ok := seen[fi]; ok {
			r.dup[i] = j
			out[i] = out[j]
			continue
		}
		seen[fi], r.dup[i] = i, -1
		leaves := make(map[int]bool)
		for _, l := range appendLeaves(nil, &fields[fi]) {
			leaves[l] = true
		}
		src := fr
		if reusable(fields[fi].Field.Type) {
			src = pooled
		}
		cr, err := src.GetFieldReader(ctx, fi, leaves, rowGroups)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", fields[fi].Field.Name, err)
		}
		r.cols[i] = cr
		if sp.Offset > 0 {
			open := func() (*pqarrow.ColumnReader, error) { return src.GetFieldReader(ctx, fi, leaves, rowGroups) }
			if r.cols[i], err = seekColumn(cr, open, sp.Offset, r.read); err != nil {
				return nil, fmt.Errorf("row group %d, column %q: seeking to row %d: %w", first, fields[fi].Field.Name, sp.Offset, err)
			}
			cr = r.cols[i]
		}
		f := *cr.Field()
		f.Type = outputType(f.Type)
		out[i] = f
	}
	r.schema = arrow.NewSchema(out, nil)
	return r, nil
}

// seekColumn positions cr at row offset of its first row group. It uses
// SeekToRow, which jumps by the offset index, or else by page headers from
// the chunk's data_page_offset. When the first data page follows a
// dictionary page and the file has no offset index (parquet-mr, Spark,
// DuckDB and Arrow C++ files), that skips the dictionary and SeekToRow
// fails ("dictionary page must be before data page"); then cr is released
// and a fresh reader from open decodes and drops offset rows instead, read
// rows at a time. It returns the reader to use; on error the caller owns
// nothing more than before.
func seekColumn(cr *pqarrow.ColumnReader, open func() (*pqarrow.ColumnReader, error), offset, read int64) (*pqarrow.ColumnReader, error) {
	seekErr := cr.SeekToRow(offset)
	if seekErr == nil {
		return cr, nil
	}
	cr.Release()
	fresh, err := open()
	if err != nil {
		return nil, errors.Join(seekErr, err)
	}
	for left := offset; left > 0; {
		chunked, err := fresh.NextBatch(min(left, read))
		if err != nil {
			fresh.Release()
			return nil, err
		}
		n := int64(chunked.Len())
		chunked.Release()
		if n == 0 {
			fresh.Release()
			return nil, fmt.Errorf("column ended %d rows before row %d", left, offset)
		}
		left -= n
	}
	return fresh, nil
}

// reusable tells whether a column of type t may be decoded into reused
// memory (ReadOptions.Reuse): numbers and times, whose values a caller
// reads by value. Strings, binaries, decimals and nested types are not.
func reusable(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64,
		arrow.DATE32, arrow.DATE64, arrow.TIMESTAMP, arrow.TIME32, arrow.TIME64, arrow.DURATION:
		return true
	}
	return false
}

func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}

// rowGroupOf names the row group holding file row n.
func (r *reader) rowGroupOf(n int64) int {
	for i := 0; i+1 < len(r.rgStart); i++ {
		if n < r.rgStart[i+1] {
			return i
		}
	}
	return len(r.rgStart) - 2
}

// Schema is the schema of the batches Next returns.
func (r *reader) Schema() *arrow.Schema { return r.schema }

// Next returns the next batch, or io.EOF after the last row of the shard.
func (r *reader) Next(ctx context.Context) (arrow.RecordBatch, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.next >= r.end {
		return nil, io.EOF
	}
	if r.of == nil {
		return nil, fmt.Errorf("parquet file %s: reader is closed", r.plan.File)
	}
	if r.pending == nil {
		rec, err := r.decode(min(r.read, r.end-r.next))
		if err != nil {
			r.err = fmt.Errorf("parquet file %s: row group %d (file row %d): %w", r.plan.File, r.rowGroupOf(r.next), r.next, err)
			return nil, r.err
		}
		r.pending, r.pendingOff = rec, 0
	}
	var rec arrow.RecordBatch
	if n := r.pending.NumRows(); r.pendingOff == 0 && n <= r.batch {
		rec, r.pending = r.pending, nil
	} else {
		end := min(r.pendingOff+r.batch, n)
		rec = r.pending.NewSlice(r.pendingOff, end)
		r.pendingOff = end
		if end == n {
			r.pending.Release()
			r.pending = nil
		}
	}
	r.last = r.next
	r.next += rec.NumRows()
	return rec, nil
}

// decode reads n rows of every column into one record batch with the output
// schema. Decoder panics on corrupt pages become errors.
func (r *reader) decode(n int64) (rec arrow.RecordBatch, err error) {
	cols := make([]arrow.Array, len(r.cols))
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("corrupt data: %v", p)
		}
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, cr := range r.cols {
		if j := r.dup[i]; j >= 0 {
			cols[j].Retain()
			cols[i] = cols[j]
			continue
		}
		name := r.schema.Field(i).Name
		chunked, err := cr.NextBatch(n)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", name, err)
		}
		arr, err := single(chunked)
		chunked.Release()
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", name, err)
		}
		if int64(arr.Len()) != n {
			got := arr.Len()
			arr.Release()
			return nil, fmt.Errorf("column %q: decoded %d rows, want %d (file shorter than its metadata says)", name, got, n)
		}
		cols[i] = convert(arr, r.schema.Field(i).Type)
	}
	return array.NewRecordBatch(r.schema, cols, n), nil
}

// single joins a chunked column (a read crossing row groups gives one chunk
// per row group) into one array.
func single(c *arrow.Chunked) (arrow.Array, error) {
	switch chunks := c.Chunks(); len(chunks) {
	case 0:
		return array.MakeArrayOfNull(memory.DefaultAllocator, c.DataType(), 0), nil
	case 1:
		chunks[0].Retain()
		return chunks[0], nil
	default:
		return array.Concatenate(chunks, memory.DefaultAllocator)
	}
}

// convert gives arr the output type want: binary relabelled as string
// (same layout, no copy), string dictionaries decoded. It takes ownership
// of arr.
func convert(arr arrow.Array, want arrow.DataType) arrow.Array {
	if arrow.TypeEqual(arr.DataType(), want) {
		return arr
	}
	defer arr.Release()
	if dict, ok := arr.(*array.Dictionary); ok {
		return decodeDict(dict, want)
	}
	d := arr.Data()
	nd := array.NewData(want, d.Len(), d.Buffers(), d.Children(), d.NullN(), d.Offset())
	defer nd.Release()
	return array.MakeFromData(nd)
}

// decodeDict turns a dictionary of strings or binaries into a dense array
// of type want (String or LargeString, as outputType chose).
func decodeDict(d *array.Dictionary, want arrow.DataType) arrow.Array {
	var b *array.BinaryBuilder
	switch bb := array.NewBuilder(memory.DefaultAllocator, want).(type) {
	case *array.StringBuilder:
		b = bb.BinaryBuilder
	case *array.LargeStringBuilder:
		b = bb.BinaryBuilder
	}
	defer b.Release()
	var appendValue func(i int)
	switch v := d.Dictionary().(type) {
	case *array.String:
		appendValue = func(i int) { b.AppendString(v.Value(i)) }
	case *array.LargeString:
		appendValue = func(i int) { b.AppendString(v.Value(i)) }
	case *array.Binary:
		appendValue = func(i int) { b.Append(v.Value(i)) }
	case *array.LargeBinary:
		appendValue = func(i int) { b.Append(v.Value(i)) }
	}
	b.Reserve(d.Len())
	for i := range d.Len() {
		if d.IsNull(i) {
			b.AppendNull()
			continue
		}
		appendValue(d.GetValueIndex(i))
	}
	arr := b.NewArray()
	defer arr.Release()
	// NewArray of the embedded binary builder gives a Binary array; relabel
	// it with the string type (same layout).
	data := arr.Data()
	nd := array.NewData(want, data.Len(), data.Buffers(), nil, data.NullN(), data.Offset())
	defer nd.Release()
	return array.MakeFromData(nd)
}

// Position names file row n of the batch returned last:
// "data/part-0.parquet row 1234", counting rows from 0 within the file.
func (r *reader) Position(row int) string {
	return fmt.Sprintf("%s row %d", r.plan.File, r.last+int64(row))
}

// Locate implements sources.BatchReader.
func (r *reader) Locate() func(row int) string {
	file, last := r.plan.File, r.last
	return func(row int) string { return fmt.Sprintf("%s row %d", file, last+int64(row)) }
}

// Close releases the column readers and closes the file.
func (r *reader) Close() error {
	if r.of == nil {
		return nil
	}
	name := r.plan.File
	err := r.release()
	if err != nil {
		return fmt.Errorf("parquet file %s: close: %w", name, err)
	}
	return nil
}

// release frees everything the reader holds and closes the file.
func (r *reader) release() error {
	if r.pending != nil {
		r.pending.Release()
		r.pending = nil
	}
	for i, c := range r.cols {
		if c != nil {
			c.Release()
			r.cols[i] = nil
		}
	}
	if r.of == nil {
		return nil
	}
	err := r.of.Close()
	r.of = nil
	return err
}
