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
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/sources"
)

// DefaultBatchSize is used when ReadOptions.BatchSize is zero or negative.
const DefaultBatchSize = 1024

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
		batch = DefaultBatchSize
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
	mem := memory.DefaultAllocator
	if t.elemOID != 0 {
		lb := array.NewListBuilder(mem, t.arrow.(*arrow.ListType).Elem())
		return &listDec{b: lb, elemOID: t.elemOID, elem: newElemAppender(t.elemOID, lb.ValueBuilder())}
	}
	switch t.oid {
	case oidInt2:
		return &fixedDec[int16]{b: array.NewInt16Builder(mem), size: 2, get: getInt16}
	case oidInt4:
		return &fixedDec[int32]{b: array.NewInt32Builder(mem), size: 4, get: getInt32}
	case oidInt8:
		return &fixedDec[int64]{b: array.NewInt64Builder(mem), size: 8, get: getInt64}
	case oidFloat4:
		return &fixedDec[float32]{b: array.NewFloat32Builder(mem), size: 4, get: getFloat32}
	case oidFloat8:
		return &fixedDec[float64]{b: array.NewFloat64Builder(mem), size: 8, get: getFloat64}
	case oidBool:
		return &fixedDec[bool]{b: array.NewBooleanBuilder(mem), size: 1, get: getBool}
	default: // oidText
		return &stringDec{b: array.NewStringBuilder(mem)}
	}
}

func getInt16(v []byte) int16     { return int16(binary.BigEndian.Uint16(v)) }
func getInt32(v []byte) int32     { return int32(binary.BigEndian.Uint32(v)) }
func getInt64(v []byte) int64     { return int64(binary.BigEndian.Uint64(v)) }
func getFloat32(v []byte) float32 { return math.Float32frombits(binary.BigEndian.Uint32(v)) }
func getFloat64(v []byte) float64 { return math.Float64frombits(binary.BigEndian.Uint64(v)) }
func getBool(v []byte) bool       { return v[0] != 0 }

// fixedBuilder is an Arrow builder of fixed-width values of type T.
type fixedBuilder[T any] interface {
	array.Builder
	UnsafeAppend(T)
}

// fixedDec decodes a fixed-width binary value of size bytes.
type fixedDec[T any] struct {
	b    fixedBuilder[T]
	size int
	get  func([]byte) T
}

func (d *fixedDec[T]) reserve(n int) { d.b.Reserve(n) }

func (d *fixedDec[T]) append(v []byte) error {
	if v == nil {
		d.b.AppendNull()
		return nil
	}
	if len(v) != d.size {
		return fmt.Errorf("binary value of %d bytes, want %d", len(v), d.size)
	}
	if d.b.Len() >= d.b.Cap() {
		d.b.Reserve(1)
	}
	d.b.UnsafeAppend(d.get(v))
	return nil
}

func (d *fixedDec[T]) finish() arrow.Array { return d.b.NewArray() }
func (d *fixedDec[T]) release()            { d.b.Release() }

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

// elemAppender appends one array element (nil: NULL) of a known size.
type elemAppender struct {
	size   int
	append func(v []byte)
	null   func()
}

func newElemAppender(oid uint32, vb array.Builder) elemAppender {
	switch oid {
	case oidInt2:
		b := vb.(*array.Int16Builder)
		return elemAppender{2, func(v []byte) { b.Append(getInt16(v)) }, b.AppendNull}
	case oidInt4:
		b := vb.(*array.Int32Builder)
		return elemAppender{4, func(v []byte) { b.Append(getInt32(v)) }, b.AppendNull}
	case oidInt8:
		b := vb.(*array.Int64Builder)
		return elemAppender{8, func(v []byte) { b.Append(getInt64(v)) }, b.AppendNull}
	case oidFloat4:
		b := vb.(*array.Float32Builder)
		return elemAppender{4, func(v []byte) { b.Append(getFloat32(v)) }, b.AppendNull}
	default: // oidFloat8
		b := vb.(*array.Float64Builder)
		return elemAppender{8, func(v []byte) { b.Append(getFloat64(v)) }, b.AppendNull}
	}
}

// listDec decodes a one-dimensional binary array into a List. The binary
// array format is: ndim, has-nulls flag, element OID, then (length, lower
// bound) per dimension, then per element a length (-1: NULL) and its bytes.
type listDec struct {
	b       *array.ListBuilder
	elemOID uint32
	elem    elemAppender
}

func (d *listDec) reserve(n int) { d.b.Reserve(n) }

func (d *listDec) append(v []byte) error {
	if v == nil {
		d.b.AppendNull()
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
		d.b.Append(true)
		return nil
	case ndim != 1:
		return fmt.Errorf("%d-dimensional array, want one dimension", ndim)
	case len(v) < 20:
		return fmt.Errorf("binary array of %d bytes is too short", len(v))
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	p := v[20:]
	if n < 0 || n > len(p)/4 {
		return fmt.Errorf("array length %d does not fit its %d bytes", n, len(v))
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
		if int(l) != d.elem.size || len(q) < int(l) {
			return fmt.Errorf("array element %d of %d bytes, want %d", i, l, d.elem.size)
		}
		q = q[l:]
	}
	d.b.Append(true)
	d.b.ValueBuilder().Reserve(n)
	for i := 0; i < n; i++ {
		l := int32(binary.BigEndian.Uint32(p))
		p = p[4:]
		if l == -1 {
			d.elem.null()
			continue
		}
		d.elem.append(p[:l])
		p = p[l:]
	}
	return nil
}

func (d *listDec) finish() arrow.Array { return d.b.NewArray() }
func (d *listDec) release()            { d.b.Release() }
