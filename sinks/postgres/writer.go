package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/sinks"
)

// Streaming parameters: a shard writer holds at most about
// (chunkQueue+2) × chunkSize bytes of encoded rows, whatever the shard size.
const (
	chunkSize  = 256 << 10
	chunkQueue = 4
)

// rollbackTimeout bounds the wait for a failed attempt's COPY and rollback.
const rollbackTimeout = 10 * time.Second

var errAborted = errors.New("shard attempt aborted")

// copyHeader starts a binary COPY stream: signature, flags, extension length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// shardWriter is one attempt at one shard: a transaction on a dedicated
// connection with a binary COPY in progress, fed by Write.
type shardWriter struct {
	s       *Sink
	run     sinks.RunInfo
	version string
	index   int
	key     string // s.active key
	cols    []column

	conn   *pgxpool.Conn
	tx     pgx.Tx
	cancel context.CancelFunc

	ch    chan []byte   // encoded chunks to the COPY reader
	free  chan []byte   // chunks the reader is done with
	abort chan struct{} // closed by Abort: the reader fails the COPY
	done  chan struct{} // closed when the COPY returned
	tag   pgconn.CommandTag
	err   error // COPY result, valid after done

	abortOnce sync.Once
	mu        sync.Mutex // serialises Write, Commit and the end of Abort
	buf       []byte
	rows      int64
	finished  bool
}

// Shard starts an attempt at shard index: one transaction that first removes
// an earlier committed attempt's rows from the run table and then streams
// rows with a binary COPY. An earlier attempt of the same shard still open in this
// process (abandoned by its caller) is aborted first.
func (s *Sink) Shard(ctx context.Context, run sinks.RunInfo, index int) (sinks.ShardWriter, error) {
	cols, err := s.columns(ctx, run)
	if err != nil {
		return nil, err
	}
	key := run.Version + "\x00" + strconv.Itoa(index)
	s.mu.Lock()
	prev := s.active[key]
	s.mu.Unlock()
	if prev != nil {
		_ = prev.Abort(ctx)
	}
	op := fmt.Sprintf("shard %d of run %s", index, run.Version)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	w := &shardWriter{
		s: s, run: run, version: run.Version, index: index, key: key, cols: cols, conn: conn,
		ch: make(chan []byte, chunkQueue), free: make(chan []byte, chunkQueue+2),
		abort: make(chan struct{}), done: make(chan struct{}),
	}
	copySQL, err := w.begin(ctx)
	if err != nil {
		if w.tx != nil {
			_ = w.tx.Rollback(context.WithoutCancel(ctx))
		}
		conn.Release()
		return nil, s.wrap(op, err)
	}
	w.buf = append(make([]byte, 0, chunkSize+64<<10), copyHeader...)
	cctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.tag, w.err = conn.Conn().PgConn().CopyFrom(cctx, &chunkReader{w: w}, copySQL)
	}()
	s.mu.Lock()
	s.active[key] = w
	s.mu.Unlock()
	return w, nil
}

// shardLockWait bounds how long an attempt waits for another attempt of
// the same shard that holds its row lock before ending that attempt's
// session: a frozen or cut-off attempt (its lease lost, or a speculative
// twin) must not hold its successor forever.
const shardLockWait = 3 * time.Second

// begin opens the attempt's transaction and returns the COPY statement. An
// attempt whose shard row is held by another session past shardLockWait
// ends that session (only attempts of this very shard carry its label) and
// tries once more.
func (w *shardWriter) begin(ctx context.Context) (string, error) {
	for try := 0; ; try++ {
		sql, err := w.beginOnce(ctx)
		var pe *pgconn.PgError
		if try == 0 && errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
			_ = w.tx.Rollback(context.WithoutCancel(ctx))
			w.tx = nil
			n := w.endOtherAttempts(ctx)
			w.s.log.Warn("another attempt of the shard held it; ended its session", "version", w.version, "shard", w.index, "sessions", n)
			continue
		}
		return sql, err
	}
}

// attemptLabel names the sessions of attempts of this shard
// (application_name, at most 63 bytes): a hash of the schema-qualified run
// table, so that a shard of the same table and version in another schema
// (another job, another environment on the same server) is not taken for
// an attempt of this one.
func (w *shardWriter) attemptLabel() string {
	sum := sha256.Sum256([]byte(w.s.ident(w.s.runTable(w.version))))
	return fmt.Sprintf("precog-shard-%x-%d", sum[:8], w.index)
}

// endOtherAttempts terminates the other sessions writing this shard, in
// this database only (pg_stat_activity lists the whole server's).
func (w *shardWriter) endOtherAttempts(ctx context.Context) int64 {
	var n int64
	_ = w.s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()`, w.attemptLabel()).Scan(&n)
	return n
}

func (w *shardWriter) beginOnce(ctx context.Context) (string, error) {
	s := w.s
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	w.tx = tx
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL application_name = '%s'; SET LOCAL lock_timeout = %d",
		w.attemptLabel(), shardLockWait.Milliseconds())); err != nil {
		return "", err
	}
	names := make([]string, len(w.cols))
	for i, c := range w.cols {
		names[i] = quote(c.name)
	}
	rt := s.runTable(w.version)
	// The row lock serialises attempts of one shard across workers; the
	// count says whether an earlier attempt committed rows to replace.
	var commits int
	if err := tx.QueryRow(ctx, "INSERT INTO "+s.ident("precog_shards")+" (run_table, shard, commits) VALUES ($1, $2, 1)"+
		" ON CONFLICT (run_table, shard) DO UPDATE SET commits = "+s.ident("precog_shards")+".commits + 1 RETURNING commits",
		rt, w.index).Scan(&commits); err != nil {
		return "", fmt.Errorf("lock shard: %w", err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = 0"); err != nil {
		return "", err
	}
	if commits > 1 {
		tag, err := tx.Exec(ctx, "DELETE FROM "+s.ident(rt)+" WHERE "+quote(colShard)+" = $1", w.index)
		if err != nil {
			return "", fmt.Errorf("delete rows of the earlier attempt: %w", err)
		}
		s.log.Info("replacing an earlier committed attempt", "version", w.version, "shard", w.index, "rows", tag.RowsAffected())
	}
	return "COPY " + s.ident(rt) + " (" + strings.Join(names, ", ") + ", " + quote(colShard) + ") FROM STDIN (FORMAT binary)", nil
}

// chunkReader hands the encoded chunks to pgconn's CopyFrom.
type chunkReader struct {
	w   *shardWriter
	cur []byte
	buf []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.buf != nil {
			select {
			case r.w.free <- r.buf[:0]:
			default:
			}
			r.buf = nil
		}
		select {
		case b, ok := <-r.w.ch:
			if !ok {
				return 0, io.EOF
			}
			r.cur, r.buf = b, b
		case <-r.w.abort:
			return 0, errAborted
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// send hands the current chunk to the COPY and starts a new one.
func (w *shardWriter) send(ctx context.Context) error {
	select {
	case w.ch <- w.buf:
	case <-w.done:
		return w.copyErr()
	case <-w.abort:
		return errAborted
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case b := <-w.free:
		w.buf = b
	default:
		w.buf = make([]byte, 0, chunkSize+64<<10)
	}
	return nil
}

// copyErr is the COPY's failure once it has returned.
func (w *shardWriter) copyErr() error {
	if w.err != nil {
		return w.err
	}
	return errors.New("COPY ended early")
}

// Write encodes batch into the COPY stream. The batch is not retained.
func (w *shardWriter) Write(ctx context.Context, batch arrow.RecordBatch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return fmt.Errorf("postgres sink: shard %d of run %s: Write after Commit or Abort", w.index, w.version)
	}
	if err := w.write(ctx, batch); err != nil {
		return w.s.wrap(fmt.Sprintf("shard %d of run %s: rows %d..%d", w.index, w.version, w.rows, w.rows+batch.NumRows()), err)
	}
	return nil
}

func (w *shardWriter) write(ctx context.Context, batch arrow.RecordBatch) error {
	if int(batch.NumCols()) != len(w.cols) {
		return fmt.Errorf("batch has %d columns, the run's schema %d", batch.NumCols(), len(w.cols))
	}
	encs := make([]encodeFunc, len(w.cols))
	for i, c := range w.cols {
		f := batch.Schema().Field(i)
		if f.Name != c.name || !arrow.TypeEqual(f.Type, c.field.Type) {
			return fmt.Errorf("batch column %d is %s %s, the run's schema has %s %s", i, f.Name, f.Type, c.name, c.field.Type)
		}
		enc, err := encoderFor(c, batch.Column(i))
		if err != nil {
			return err
		}
		encs[i] = enc
	}
	be := binary.BigEndian
	nfields := uint16(len(encs) + 1) // and _shard
	shard := uint32(int32(w.index))
	n := int(batch.NumRows())
	for row := 0; row < n; row++ {
		b := be.AppendUint16(w.buf, nfields)
		var err error
		for c, enc := range encs {
			if b, err = enc(b, row); err != nil {
				return fmt.Errorf("row %d (of the shard: %d) column %q: %w", row, w.rows+int64(row), w.cols[c].name, err)
			}
		}
		b = be.AppendUint32(be.AppendUint32(b, 4), shard)
		w.buf = b
		if len(w.buf) >= chunkSize {
			if err := w.send(ctx); err != nil {
				return err
			}
		}
	}
	w.rows += int64(n)
	return nil
}

// Commit ends the COPY, merges (upsert) and commits the transaction; it
// replaces any earlier committed attempt of the shard.
func (w *shardWriter) Commit(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return fmt.Errorf("postgres sink: shard %d of run %s: Commit after Commit or Abort", w.index, w.version)
	}
	op := fmt.Sprintf("commit shard %d of run %s (%d rows)", w.index, w.version, w.rows)
	err := w.commit(ctx)
	w.finish(ctx, err != nil)
	return w.s.wrap(op, err)
}

func (w *shardWriter) commit(ctx context.Context) error {
	w.buf = binary.BigEndian.AppendUint16(w.buf, 0xffff) // trailer
	if err := w.send(ctx); err != nil {
		return err
	}
	close(w.ch)
	select {
	case <-w.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if w.err != nil {
		return w.err
	}
	if got := w.tag.RowsAffected(); got != w.rows {
		return fmt.Errorf("COPY stored %d rows, %d were written", got, w.rows)
	}
	return w.tx.Commit(ctx)
}

// Abort discards the attempt: the COPY fails, the transaction rolls back.
// Idempotent; safe to call from another goroutine than Write's.
func (w *shardWriter) Abort(ctx context.Context) error {
	w.abortOnce.Do(func() { close(w.abort) })
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return nil
	}
	w.finish(ctx, true)
	return nil
}

// finish ends the COPY if still running, rolls back when failed, and
// returns the connection. Called with w.mu held.
func (w *shardWriter) finish(ctx context.Context, failed bool) {
	w.finished = true
	w.abortOnce.Do(func() { close(w.abort) })
	// The reader returns errAborted or EOF, so the COPY ends; a server that
	// stopped answering is cut off by cancelling the COPY's context.
	select {
	case <-w.done:
	case <-time.After(rollbackTimeout):
		w.cancel()
		<-w.done
	}
	w.cancel()
	if failed {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		_ = w.tx.Rollback(rctx)
		cancel()
	}
	w.conn.Release()
	w.s.mu.Lock()
	if w.s.active[w.key] == w {
		delete(w.s.active, w.key)
	}
	w.s.mu.Unlock()
}
