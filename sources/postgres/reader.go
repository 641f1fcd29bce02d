package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

// ctxCheckRows is how often (in rows) Next checks its context while filling
// a batch; the Open context also interrupts a blocked network read.
const ctxCheckRows = 4096

// closeTimeout bounds the goodbye to the server when a reader is closed.
const closeTimeout = 5 * time.Second

// decodePlan parses and sanity-checks a plan produced by Plan. Arbitrary
// bytes give an error, never a panic.
func decodePlan(plan json.RawMessage) (shardPlan, error) {
	var sp shardPlan
	dec := json.NewDecoder(bytes.NewReader(plan))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return sp, fmt.Errorf("postgres source: bad shard plan: %w", err)
	}
	if dec.More() {
		return sp, errors.New("postgres source: bad shard plan: trailing data")
	}
	if sp.Column == "" {
		return sp, errors.New("postgres source: bad shard plan: no column")
	}
	switch sp.Kind {
	case kindRange:
		if sp.Hi != nil && *sp.Hi <= sp.Lo {
			return sp, fmt.Errorf("postgres source: bad shard plan: empty range [%d,%d)", sp.Lo, *sp.Hi)
		}
	case kindNull:
	case kindHash:
		if sp.Mod < 1 || sp.Rem < 0 || sp.Rem >= sp.Mod {
			return sp, fmt.Errorf("postgres source: bad shard plan: hash remainder %d modulo %d", sp.Rem, sp.Mod)
		}
	default:
		return sp, fmt.Errorf("postgres source: bad shard plan: unknown kind %q", sp.Kind)
	}
	return sp, nil
}

// Open streams one planned shard: the requested columns (all when
// opts.Columns is nil, in query order) in record batches of opts.BatchSize
// rows, over a connection of its own that Close closes. Rows are fetched
// with the binary protocol as Postgres produces them, so memory is bounded
// by the batch size. NULLs become Arrow nulls. Rows come in the order the
// query's plan yields them (ORDER BY in the query is honoured). It fails
// when the plan is malformed or was made for another query text, or when a
// requested column is missing or of an unsupported type.
func (s *Source) Open(ctx context.Context, plan json.RawMessage, opts sources.ReadOptions) (sources.BatchReader, error) {
	sp, err := decodePlan(plan)
	if err != nil {
		return nil, err
	}
	if sp.QueryID != s.queryID {
		return nil, fmt.Errorf("postgres source: shard %s was planned for another source.postgres.query (query id %s, now %s); start a new run", sp.desc(), sp.QueryID, s.queryID)
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = jobs.DefaultBatchSize // ReadOptions.BatchSize zero or negative
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.open(ctx, conn, sp, opts.Columns, batch)
	if err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return r, nil
}

func (s *Source) open(ctx context.Context, conn *pgx.Conn, sp shardPlan, columns []string, batch int) (*reader, error) {
	cols, err := s.describe(ctx, conn)
	if err != nil {
		return nil, err
	}
	var picked []column
	if columns == nil {
		picked = cols
	} else {
		for _, name := range columns {
			c, err := findColumn(cols, name, "reading shard "+sp.desc())
			if err != nil {
				return nil, err
			}
			picked = append(picked, c)
		}
	}
	if len(picked) == 0 {
		return nil, errors.New("postgres source: no columns to read")
	}
	if _, err := findColumn(cols, sp.Column, "shard plan"); err != nil {
		return nil, err
	}

	r := &reader{conn: conn, plan: sp, batch: batch, keyCol: -1}
	exprs := make([]string, len(picked))
	fields := make([]arrow.Field, len(picked))
	resultFormats := make([]int16, len(picked))
	for i, c := range picked {
		if c.read == nil {
			r.release()
			return nil, fmt.Errorf("postgres source: column %q has type %s, which the postgres source cannot read (supported: %s)", c.name, c.pgType, supportedTypes)
		}
		id := "q." + pgx.Identifier{c.name}.Sanitize()
		if c.pgType == c.read.cast {
			exprs[i] = id
		} else {
			exprs[i] = id + "::" + c.read.cast
		}
		fields[i] = c.arrowField()
		resultFormats[i] = 1 // binary
		r.decs = append(r.decs, newDecoder(c.read))
		if sp.Kind == kindRange && c.name == sp.Column && r.keyCol < 0 {
			r.keyCol = i
		}
	}
	r.schema = arrow.NewSchema(fields, nil)
	if r.keyCol >= 0 {
		r.keys = make([]int64, 0, batch)
	}

	col := "q." + pgx.Identifier{sp.Column}.Sanitize()
	var where string
	var params [][]byte
	switch sp.Kind {
	case kindRange:
		where = col + " >= $1"
		params = [][]byte{[]byte(strconv.FormatInt(sp.Lo, 10))}
		if sp.Hi != nil {
			where += " AND " + col + " < $2"
			params = append(params, []byte(strconv.FormatInt(*sp.Hi, 10)))
		}
	case kindNull:
		where = col + " IS NULL"
	case kindHash:
		// Keys whose hash is NULL (NULL keys) fall into shard 0, so that the
		// runner sees and reports them instead of them vanishing.
		where = "coalesce((hashtext(" + col + "::text) & 2147483647) % $1, 0) = $2"
		params = [][]byte{[]byte(strconv.FormatInt(sp.Mod, 10)), []byte(strconv.FormatInt(sp.Rem, 10))}
	}
	prefix := "SELECT " + strings.Join(exprs, ", ") + " FROM (\n"
	sql := prefix + s.query + wrapSuffix + " WHERE " + where
	oids := make([]uint32, len(params))
	for i := range oids {
		oids[i] = oidInt8
	}
	rr := conn.PgConn().ExecParams(ctx, sql, params, oids, nil, resultFormats)
	fds := rr.FieldDescriptions()
	if fds == nil {
		_, err := rr.Close()
		r.release()
		if err == nil {
			err = errors.New("no result description")
		}
		return nil, s.queryErr("reading shard "+sp.desc(), prefix, err)
	}
	r.rr = rr
	for i, fd := range fds {
		if i >= len(picked) || fd.DataTypeOID != picked[i].read.oid || fd.Format != 1 {
			r.Close()
			return nil, fmt.Errorf("postgres source: reading shard %s: column %d of the result is type oid %d format %d, want oid %d binary", sp.desc(), i, fd.DataTypeOID, fd.Format, picked[i].read.oid)
		}
	}
	return r, nil
}

// reader implements sources.BatchReader over one shard's result stream.
type reader struct {
	conn   *pgx.Conn
	rr     *pgconn.ResultReader // nil once the result is fully read
	plan   shardPlan
	schema *arrow.Schema
	decs   []decoder
	batch  int

	// next is the shard row of the next row to be read; last is the shard
	// row of row 0 of the batch Next returned last.
	next, last int64
	// keyCol is the output column holding the range shard's column, or -1;
	// keys holds its values for the last batch, for Position.
	keyCol int
	keys   []int64

	done bool
	err  error
}

// Schema is the schema of the batches Next returns.
func (r *reader) Schema() *arrow.Schema { return r.schema }

// Next returns the next batch, or io.EOF after the shard's last row.
func (r *reader) Next(ctx context.Context) (arrow.RecordBatch, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err := ctx.Err(); err != nil {
		// The stream is abandoned mid-result: later calls fail too.
		r.err = err
		return nil, err
	}
	if r.done {
		return nil, io.EOF
	}
	for _, d := range r.decs {
		d.reserve(r.batch)
	}
	r.keys = r.keys[:0]
	n := 0
	for n < r.batch {
		if n%ctxCheckRows == ctxCheckRows-1 {
			if err := ctx.Err(); err != nil {
				r.err = err
				return nil, err
			}
		}
		if !r.rr.NextRow() {
			_, err := r.rr.Close()
			r.rr, r.done = nil, true
			if err != nil {
				r.err = fmt.Errorf("postgres source: reading shard %s at row %d: %w", r.plan.desc(), r.next, err)
				return nil, r.err
			}
			break
		}
		vals := r.rr.Values()
		if len(vals) != len(r.decs) {
			r.err = fmt.Errorf("postgres source: reading shard %s row %d: got %d values, want %d", r.plan.desc(), r.next, len(vals), len(r.decs))
			return nil, r.err
		}
		for i, d := range r.decs {
			if err := d.append(vals[i]); err != nil {
				r.err = fmt.Errorf("postgres source: shard %s row %d column %q: %w", r.plan.desc(), r.next, r.schema.Field(i).Name, err)
				return nil, r.err
			}
		}
		if r.keyCol >= 0 {
			r.keys = append(r.keys, decodeInt(vals[r.keyCol]))
		}
		r.next++
		n++
	}
	if n == 0 {
		return nil, io.EOF
	}
	cols := make([]arrow.Array, len(r.decs))
	for i, d := range r.decs {
		cols[i] = d.finish()
	}
	rec := array.NewRecordBatch(r.schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	r.last = r.next - int64(n)
	return rec, nil
}

// decodeInt reads a binary int2/int4/int8 (the shard column), 0 for NULL.
func decodeInt(v []byte) int64 {
	switch len(v) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(v)))
	case 4:
		return int64(int32(binary.BigEndian.Uint32(v)))
	case 8:
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// Position names row `row` of the batch Next returned last:
// "postgres query shard id [0,1000) row 17 (id=17)", counting rows from 0
// within the shard, with the shard column's value when it is read.
func (r *reader) Position(row int) string {
	pos := fmt.Sprintf("postgres query shard %s row %d", r.plan.desc(), r.last+int64(row))
	if r.keyCol >= 0 && row >= 0 && row < len(r.keys) {
		pos += fmt.Sprintf(" (%s=%d)", r.plan.Column, r.keys[row])
	}
	return pos
}

// Locate implements sources.BatchReader.
func (r *reader) Locate() func(row int) string {
	desc, last, col := r.plan.desc(), r.last, r.plan.Column
	var keys []int64
	if r.keyCol >= 0 {
		keys = append([]int64(nil), r.keys...) // r.keys is reused by the next batch
	}
	return func(row int) string {
		pos := fmt.Sprintf("postgres query shard %s row %d", desc, last+int64(row))
		if row >= 0 && row < len(keys) {
			pos += fmt.Sprintf(" (%s=%d)", col, keys[row])
		}
		return pos
	}
}

// Close ends the shard's query and closes its connection. Closing before
// the end does not drain the rest of the result: the connection is dropped,
// which makes Postgres abandon the query.
func (r *reader) Close() error {
	r.release()
	if r.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := r.conn.Close(ctx)
	r.conn, r.rr = nil, nil
	if err != nil {
		return fmt.Errorf("postgres source: closing shard %s: %w", r.plan.desc(), err)
	}
	return nil
}

func (r *reader) release() {
	for _, d := range r.decs {
		d.release()
	}
	r.decs = nil
}

// decoder appends binary-format values of one column to an Arrow builder.
type decoder interface {
	// reserve makes room for n more values.
	reserve(n int)
	// append decodes one value; nil is NULL.
	append(v []byte) error
	// finish returns the values appended since the last finish.
	finish() arrow.Array
	release()
}

func newDecoder(t *readType) decoder {
	if t.elemOID != 0 {
		elem := t.arrow.(*arrow.ListType).Elem()
		return &listDec{typ: t.arrow, elemOID: t.elemOID, elems: fixedBuf{typ: elem, size: fixedSize(t.elemOID)}}
	}
	switch t.oid {
	case oidBool:
		return &boolDec{}
	case oidText:
		return &stringDec{b: array.NewStringBuilder(memory.DefaultAllocator)}
	default:
		return &fixedDec{fixedBuf{typ: t.arrow, size: fixedSize(t.oid)}}
	}
}

// fixedSize is the binary size of a fixed-width numeric type.
func fixedSize(oid uint32) int {
	switch oid {
	case oidInt2:
		return 2
	case oidInt4, oidFloat4:
		return 4
	default: // int8, float8
		return 8
	}
}

// fixedBuf accumulates fixed-width numbers straight into an Arrow
// little-endian data buffer: a binary int2/int4/int8/float4/float8 is the
// same bits big-endian, so decoding is a byte swap, with no per-type code
// and no builder. The validity bitmap is allocated at the first NULL.
type fixedBuf struct {
	typ   arrow.DataType
	size  int
	data  []byte
	valid []byte
	n     int
	nulls int
}

// reserve makes room for n more values, keeping those appended so far.
func (f *fixedBuf) reserve(n int) {
	need := (f.n + n) * f.size
	if need <= cap(f.data) {
		return
	}
	grown := make([]byte, f.n*f.size, max(need, 2*cap(f.data)))
	copy(grown, f.data[:f.n*f.size])
	f.data = grown
	if f.valid != nil {
		v := make([]byte, bitutil.BytesForBits(int64(cap(grown)/f.size)))
		copy(v, f.valid)
		f.valid = v
	}
}

// appendValue appends a value whose length was checked to be f.size.
func (f *fixedBuf) appendValue(v []byte) {
	if (f.n+1)*f.size > cap(f.data) {
		f.reserve(max(f.n, 64))
	}
	off := f.n * f.size
	f.data = f.data[:off+f.size]
	switch f.size {
	case 2:
		binary.LittleEndian.PutUint16(f.data[off:], binary.BigEndian.Uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(f.data[off:], binary.BigEndian.Uint32(v))
	default:
		binary.LittleEndian.PutUint64(f.data[off:], binary.BigEndian.Uint64(v))
	}
	if f.valid != nil {
		bitutil.SetBit(f.valid, f.n)
	}
	f.n++
}

func (f *fixedBuf) appendNull() {
	if (f.n+1)*f.size > cap(f.data) {
		f.reserve(max(f.n, 64))
	}
	if f.valid == nil {
		f.valid = make([]byte, bitutil.BytesForBits(int64(cap(f.data)/f.size)))
		bitutil.SetBitsTo(f.valid, 0, int64(f.n), true)
	}
	off := f.n * f.size
	f.data = f.data[:off+f.size]
	clear(f.data[off:])
	f.n++
	f.nulls++
}

// finish hands the buffers to a new array and starts empty ones.
func (f *fixedBuf) finish() arrow.Array {
	var valid *memory.Buffer
	if f.valid != nil {
		valid = memory.NewBufferBytes(f.valid[:bitutil.BytesForBits(int64(f.n))])
	}
	d := array.NewData(f.typ, f.n, []*memory.Buffer{valid, memory.NewBufferBytes(f.data)}, nil, f.nulls, 0)
	defer d.Release()
	*f = fixedBuf{typ: f.typ, size: f.size}
	return array.MakeFromData(d)
}

// fixedDec decodes a fixed-width numeric column.
type fixedDec struct{ fixedBuf }

func (d *fixedDec) append(v []byte) error {
	if v == nil {
		d.appendNull()
		return nil
	}
	if len(v) != d.size {
		return fmt.Errorf("binary value of %d bytes, want %d", len(v), d.size)
	}
	d.appendValue(v)
	return nil
}

func (d *fixedDec) release() { d.fixedBuf = fixedBuf{} }

// boolDec decodes bool columns.
type boolDec struct{ b *array.BooleanBuilder }

func (d *boolDec) reserve(n int) {
	if d.b == nil {
		d.b = array.NewBooleanBuilder(memory.DefaultAllocator)
	}
	d.b.Reserve(n)
}

func (d *boolDec) append(v []byte) error {
	switch {
	case v == nil:
		d.b.AppendNull()
	case len(v) != 1:
		return fmt.Errorf("binary bool of %d bytes", len(v))
	default:
		d.b.Append(v[0] != 0)
	}
	return nil
}

func (d *boolDec) finish() arrow.Array { return d.b.NewArray() }

func (d *boolDec) release() {
	if d.b != nil {
		d.b.Release()
		d.b = nil
	}
}

// stringDec copies text values (their binary format is the UTF-8 bytes).
type stringDec struct{ b *array.StringBuilder }

func (d *stringDec) reserve(n int) { d.b.Reserve(n) }

func (d *stringDec) append(v []byte) error {
	if v == nil {
		d.b.AppendNull()
		return nil
	}
	d.b.BinaryBuilder.Append(v)
	return nil
}

func (d *stringDec) finish() arrow.Array { return d.b.NewArray() }
func (d *stringDec) release()            { d.b.Release() }

// listDec decodes a one-dimensional binary array into a List. The binary
// array format is: ndim, has-nulls flag, element OID, then (length, lower
// bound) per dimension, then per element a length (-1: NULL) and its bytes.
type listDec struct {
	typ     arrow.DataType
	elemOID uint32
	offsets []int32
	valid   []byte // list validity, allocated at the first NULL list
	n       int
	nulls   int
	elems   fixedBuf
}

func (d *listDec) reserve(n int) {
	if cap(d.offsets) < d.n+n+1 {
		grown := make([]int32, d.n+1, d.n+n+1)
		copy(grown, d.offsets)
		d.offsets = grown
		if d.valid != nil {
			v := make([]byte, bitutil.BytesForBits(int64(cap(grown))))
			copy(v, d.valid)
			d.valid = v
		}
	}
	if len(d.offsets) == 0 {
		d.offsets = d.offsets[:1]
	}
}

// endList records the end offset of list d.n (valid or not).
func (d *listDec) endList(valid bool) {
	d.reserve(1)
	if !valid && d.valid == nil {
		d.valid = make([]byte, bitutil.BytesForBits(int64(cap(d.offsets))))
		bitutil.SetBitsTo(d.valid, 0, int64(d.n), true)
	}
	if d.valid != nil {
		bitutil.SetBitTo(d.valid, d.n, valid)
	}
	if !valid {
		d.nulls++
	}
	d.offsets = append(d.offsets, int32(d.elems.n))
	d.n++
}

func (d *listDec) append(v []byte) error {
	if v == nil {
		d.endList(false)
		return nil
	}
	if len(v) < 12 {
		return fmt.Errorf("binary array of %d bytes is too short", len(v))
	}
	ndim := int32(binary.BigEndian.Uint32(v))
	if oid := binary.BigEndian.Uint32(v[8:]); oid != d.elemOID {
		return fmt.Errorf("array of element type oid %d, want %d", oid, d.elemOID)
	}
	switch {
	case ndim == 0:
		d.endList(true)
		return nil
	case ndim != 1:
		return fmt.Errorf("%d-dimensional array, want one dimension", ndim)
	case len(v) < 20:
		return fmt.Errorf("binary array of %d bytes is too short", len(v))
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	p := v[20:]
	size := d.elems.size
	if n < 0 || n > len(p)/4 {
		return fmt.Errorf("array length %d does not fit its %d bytes", n, len(v))
	}
	if d.elems.n+n > math.MaxInt32 {
		return fmt.Errorf("batch holds over %d list elements; use a smaller batch size", math.MaxInt32)
	}
	// Validate the whole value before appending anything, so a corrupt
	// value never leaves a half-appended list.
	q := p
	for i := 0; i < n; i++ {
		if len(q) < 4 {
			return fmt.Errorf("array truncated at element %d", i)
		}
		l := int32(binary.BigEndian.Uint32(q))
		q = q[4:]
		if l == -1 {
			continue
		}
		if int(l) != size || len(q) < size {
			return fmt.Errorf("array element %d of %d bytes, want %d", i, l, size)
		}
		q = q[size:]
	}
	d.elems.reserve(n)
	for i := 0; i < n; i++ {
		l := int32(binary.BigEndian.Uint32(p))
		p = p[4:]
		if l == -1 {
			d.elems.appendNull()
			continue
		}
		d.elems.appendValue(p)
		p = p[size:]
	}
	d.endList(true)
	return nil
}

func (d *listDec) finish() arrow.Array {
	values := d.elems.finish()
	defer values.Release()
	if len(d.offsets) == 0 {
		d.offsets = []int32{0}
	}
	var valid *memory.Buffer
	if d.valid != nil {
		valid = memory.NewBufferBytes(d.valid[:bitutil.BytesForBits(int64(d.n))])
	}
	offs := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(d.offsets))
	data := array.NewData(d.typ, d.n, []*memory.Buffer{valid, offs}, []arrow.ArrayData{values.Data()}, d.nulls, 0)
	defer data.Release()
	*d = listDec{typ: d.typ, elemOID: d.elemOID, elems: d.elems}
	return array.MakeFromData(data)
}

func (d *listDec) release() { d.offsets, d.valid, d.elems = nil, nil, fixedBuf{} }
