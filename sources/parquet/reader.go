package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/sources"
)

// DefaultBatchSize is used when ReadOptions.BatchSize is zero or negative.
const DefaultBatchSize = 1024

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
		batch = DefaultBatchSize
	}

	fp, err := statFingerprint(sp.File)
	if err != nil {
		return nil, fmt.Errorf("parquet file %s: %w", sp.File, err)
	}
	if fp.Size != sp.Size || fp.MTimeNS != sp.MTimeNS {
		return nil, fmt.Errorf("parquet file %s changed since the run was planned (size %d→%d, mtime %d→%d); start a new run",
			sp.File, sp.Size, fp.Size, sp.MTimeNS, fp.MTimeNS)
	}

	of, err := openFile(sp.File)
	if err != nil {
		return nil, fmt.Errorf("parquet file %s: %w", sp.File, err)
	}
	r, err := newReader(ctx, of, sp, opts.Columns, batch, readRows(batch))
	if err != nil {
		of.Close()
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
	dec := json.NewDecoder(bytes.NewReader(plan))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return sp, fmt.Errorf("parquet source: bad shard plan: %w", err)
	}
	if dec.More() {
		return sp, errors.New("parquet source: bad shard plan: trailing data")
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

// reader implements sources.BatchReader over one shard.
type reader struct {
	of   *openedFile
	rr   pqarrow.RecordReader
	plan shardPlan

	// rgStart[i] is the file row of the first row of row group i; the last
	// entry is the file's row count.
	rgStart []int64
	// next is the file row of the next row to be delivered; last is the file
	// row of row 0 of the batch returned last.
	next, last int64
	end        int64 // file row one past the shard

	// cols maps output column i to the record reader's column; conv marks
	// columns whose type is relabelled (binary → string).
	cols    []int
	schema  *arrow.Schema
	convert bool
	ident   bool // output is the record reader's batch unchanged

	// batch is the rows per returned batch; pending holds the rest of the
	// last decoded batch (already projected), from row pendingOff on.
	batch      int64
	pending    arrow.RecordBatch
	pendingOff int64

	err error
}

func newReader(ctx context.Context, of *openedFile, sp shardPlan, columns []string, batch, read int) (r *reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("opening shard: %v", p)
		}
	}()
	md := of.rdr.MetaData()
	nrg := md.NumRowGroups()
	if sp.FirstRowGroup+sp.NumRowGroups > nrg || sp.FirstRowGroup+sp.NumRowGroups < 0 {
		return nil, fmt.Errorf("shard plan names row groups %d..%d but the file has %d", sp.FirstRowGroup, sp.FirstRowGroup+sp.NumRowGroups-1, nrg)
	}
	rgStart := make([]int64, nrg+1)
	for i := 0; i < nrg; i++ {
		rgStart[i+1] = rgStart[i] + md.RowGroup(i).NumRows()
	}
	first, lastRG := sp.FirstRowGroup, sp.FirstRowGroup+sp.NumRowGroups
	span := rgStart[lastRG] - rgStart[first]
	if sp.Offset > span || sp.Rows > span-sp.Offset {
		return nil, fmt.Errorf("shard plan reads rows %d+%d of row groups %d..%d, which hold %d rows", sp.Offset, sp.Rows, first, lastRG-1, span)
	}

	fr, err := pqarrow.NewFileReader(of.rdr, pqarrow.ArrowReadProperties{BatchSize: int64(read)}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}

	// Resolve the projection to top-level fields, then to their leaves.
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
	picked := make(map[int]bool)
	var leaves []int
	for _, fi := range want {
		if picked[fi] {
			continue
		}
		picked[fi] = true
		leaves = appendLeaves(leaves, &fields[fi])
	}
	rowGroups := make([]int, sp.NumRowGroups)
	for i := range rowGroups {
		rowGroups[i] = first + i
	}
	rr, err := fr.GetRecordReader(ctx, leaves, rowGroups)
	if err != nil {
		return nil, fmt.Errorf("row groups %d..%d: %w", first, lastRG-1, err)
	}
	if sp.Offset > 0 {
		if err := rr.SeekToRow(sp.Offset); err != nil {
			rr.Release()
			return nil, fmt.Errorf("row group %d: seeking to row %d: %w", first, sp.Offset, err)
		}
	}

	// The record reader returns fields in file order; map the requested
	// order onto it.
	rsc := rr.Schema()
	r = &reader{of: of, rr: rr, plan: sp, rgStart: rgStart, batch: int64(batch)}
	r.next = rgStart[first] + sp.Offset
	r.last = r.next
	r.end = r.next + sp.Rows
	out := make([]arrow.Field, len(want))
	r.cols = make([]int, len(want))
	r.ident = len(want) == rsc.NumFields()
	for i, fi := range want {
		name := fields[fi].Field.Name
		idx := rsc.FieldIndices(name)
		if len(idx) == 0 {
			rr.Release()
			return nil, fmt.Errorf("column %q missing from the record reader", name)
		}
		r.cols[i] = idx[0]
		f := rsc.Field(idx[0])
		if t := outputType(f.Type); t != f.Type {
			f.Type = t
			r.convert = true
		}
		out[i] = f
		if idx[0] != i {
			r.ident = false
		}
	}
	if r.convert {
		r.ident = false
	}
	r.schema = arrow.NewSchema(out, nil)
	return r, nil
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
	if r.pending == nil {
		rec, err := r.read()
		if err != nil {
			r.err = fmt.Errorf("parquet file %s: row group %d (file row %d): %w", r.plan.File, r.rowGroupOf(r.next), r.next, err)
			return nil, r.err
		}
		if left := r.end - r.next; rec.NumRows() > left {
			s := rec.NewSlice(0, left)
			rec.Release()
			rec = s
		}
		if !r.ident {
			out := r.project(rec)
			rec.Release()
			rec = out
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

// read pulls one batch from the record reader, turning decoder panics on
// corrupt pages into errors.
func (r *reader) read() (rec arrow.RecordBatch, err error) {
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("corrupt data: %v", p)
		}
	}()
	if !r.rr.Next() {
		if err := r.rr.Err(); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return nil, fmt.Errorf("file ended %d rows before the planned end of the shard", r.end-r.next)
	}
	rec = r.rr.RecordBatch()
	if rec.NumRows() == 0 {
		return nil, errors.New("reader returned an empty batch")
	}
	rec.Retain()
	return rec, nil
}

// project builds the output batch: requested column order, binary columns
// relabelled as strings. No data is copied.
func (r *reader) project(rec arrow.RecordBatch) arrow.RecordBatch {
	cols := make([]arrow.Array, len(r.cols))
	for i, c := range r.cols {
		col := rec.Column(c)
		want := r.schema.Field(i).Type
		if col.DataType() == want {
			col.Retain()
			cols[i] = col
			continue
		}
		if dict, ok := col.(*array.Dictionary); ok {
			cols[i] = decodeDict(dict, want)
			continue
		}
		d := col.Data()
		nd := array.NewData(want, d.Len(), d.Buffers(), d.Children(), d.NullN(), d.Offset())
		cols[i] = array.MakeFromData(nd)
		nd.Release()
	}
	out := array.NewRecordBatch(r.schema, cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out
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

// Close releases the record reader and closes the file.
func (r *reader) Close() error {
	if r.pending != nil {
		r.pending.Release()
		r.pending = nil
	}
	if r.rr != nil {
		r.rr.Release()
		r.rr = nil
	}
	if r.of == nil {
		return nil
	}
	err := r.of.Close()
	r.of = nil
	if err != nil {
		return fmt.Errorf("parquet file %s: close: %w", r.plan.File, err)
	}
	return nil
}
