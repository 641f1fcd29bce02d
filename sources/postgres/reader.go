package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
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
	if err := sources.DecodePlan(plan, &sp); err != nil {
		return sp, fmt.Errorf("postgres source: bad shard plan: %w", err)
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
