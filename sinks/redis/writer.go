package redis

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/sinks"
)

// retryPolicy bounds the re-sends of a failed pipeline: exponential
// backoff with jitter from base up to max between attempts, at most
// attempts sends (about 8 s of waiting with the defaults, enough to ride
// out a failover or a restart).
type retryPolicy struct {
	attempts  int
	base, max time.Duration
}

var defaultRetry = retryPolicy{attempts: 10, base: 25 * time.Millisecond, max: 2 * time.Second}

// pipeBatch is one pipeline's worth of SETs: every key and value lives in
// one reused arena, so building a batch allocates nothing once warm.
type pipeBatch struct {
	arena []byte
	spans []span
	// keyRec is the batch's part of the version's key record (see
	// Layout.Keys), built once before the first send.
	keyRec []byte
}

// span locates one key and its value in the arena.
type span struct{ k0, k1, v0, v1 int32 }

func (b *pipeBatch) reset() {
	b.arena = b.arena[:0]
	b.spans = b.spans[:0]
	b.keyRec = b.keyRec[:0]
}

// buildKeyRecord encodes the batch's entity keys (each record key without
// its prefixLen-byte prefix) as uvarint length + bytes into b.keyRec.
func (b *pipeBatch) buildKeyRecord(prefixLen int) {
	b.keyRec = b.keyRec[:0]
	for _, s := range b.spans {
		k := b.arena[int(s.k0)+prefixLen : s.k1]
		b.keyRec = binary.AppendUvarint(b.keyRec, uint64(len(k)))
		b.keyRec = append(b.keyRec, k...)
	}
}

// key and value view the arena without copying; they are valid until the
// batch is reset, which happens only after its pipeline has returned.
func (b *pipeBatch) key(i int) string {
	s := b.spans[i]
	return unsafe.String(&b.arena[s.k0], int(s.k1-s.k0))
}

func (b *pipeBatch) value(i int) []byte {
	s := b.spans[i]
	return b.arena[s.v0:s.v1:s.v1]
}

// shardWriter is one attempt at one shard: it encodes rows into batches
// and keeps up to depth pipelines in flight while it encodes the next one.
type shardWriter struct {
	s     *Sink
	index int
	enc   *recordEncoder
	// prefix is "{ns}:{version}:" (atomic) or "{ns}:" (in_place).
	prefix string

	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}   // one token per pipeline in flight
	encSem chan struct{}   // one token per pipeline being encoded
	free   chan *pipeBatch // recycled batches; 2×depth+1 exist at most
	cur    *pipeBatch
	wg     sync.WaitGroup

	errMu sync.Mutex
	err   error // first pipeline failure
	done  bool

	rows    atomic.Int64 // records acknowledged by Redis
	retries atomic.Int64
	// noRetry stops re-sends once the attempt is being discarded.
	noRetry atomic.Bool
	// id identifies the attempt in Sink.active.
	id shardID
	// keysKey is the version's key record (atomic mode; "" for in_place,
	// whose records are never deleted by version).
	keysKey string
	// shardsKey holds the commit markers; nodes is the servers' state when
	// the attempt started, which the marker carries for Stage.
	shardsKey string
	nodes     []NodeState
}

func newShardWriter(s *Sink, run sinks.RunInfo, index int, enc *recordEncoder, nodes []NodeState) *shardWriter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &shardWriter{
		s:         s,
		index:     index,
		id:        shardID{run.Version, index},
		enc:       enc,
		prefix:    s.layout.RecordPrefix(run.Version),
		shardsKey: s.layout.Shards(run.Version),
		nodes:     nodes,
		ctx:       ctx,
		cancel:    cancel,
		sem:       make(chan struct{}, s.cfg.depth),
		encSem:    make(chan struct{}, s.cfg.depth),
		free:      make(chan *pipeBatch, 2*s.cfg.depth+1),
	}
	if !s.layout.InPlace {
		w.keysKey = s.layout.Keys(run.Version)
	}
	return w
}

// Write encodes the batch's rows and sends full pipelines. Rows that fill
// a whole pipeline are encoded concurrently, each pipeline by a goroutine
// that then sends it, and Write returns without waiting for them: those
// goroutines hold a reference to the batch (Retain) until their rows are
// encoded. Encoding and sending take separate tokens, depth of each, so
// that up to depth pipelines are encoded while depth others are in flight:
// with one token for both, a pipeline that takes longer to encode than
// Redis takes to store it leaves Redis idle. Write blocks while depth
// pipelines are being encoded, which bounds the batches held. An error is
// sticky: a later Write or Commit returns it and the attempt can then only
// be aborted, so a shard with a rejected row can never commit with that
// row missing.
func (w *shardWriter) Write(ctx context.Context, rec arrow.RecordBatch) error {
	if err := w.failed(); err != nil {
		return err
	}
	if err := w.write(ctx, rec); err != nil {
		w.setErr(err)
		return w.failed()
	}
	return nil
}

func (w *shardWriter) write(ctx context.Context, rec arrow.RecordBatch) error {
	bb, err := w.enc.bind(rec) // checks the schema; used for inline rows
	if err != nil {
		return fmt.Errorf("redis shard %d: %w", w.index, err)
	}
	n, batch := int(rec.NumRows()), w.s.cfg.batch
	for row := 0; row < n; {
		if w.cur == nil && n-row >= batch {
			if err := w.acquireEncoder(ctx); err != nil {
				return err
			}
			b := w.getBatch()
			lo, hi := row, row+batch
			rec.Retain()
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				own, err := w.enc.bind(rec) // writers hold per-goroutine caches
				if err == nil {
					err = w.encodeRows(b, own, lo, hi)
				}
				rec.Release()
				if err == nil {
					// The encoding token goes back only with a pipeline
					// token in hand: encoded batches never pile up.
					err = w.acquire(w.ctx)
				}
				<-w.encSem
				if err != nil {
					w.setErr(err)
					return
				}
				w.send(b)
			}()
			row = hi
			continue
		}
		if w.cur == nil {
			w.cur = w.getBatch()
		}
		hi := min(n, row+batch-len(w.cur.spans))
		if err := w.encodeRows(w.cur, bb, row, hi); err != nil {
			w.cur = nil
			return err
		}
		row = hi
		if len(w.cur.spans) >= batch {
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
	}
	return w.failed()
}

// encodeRows appends rows [lo, hi) of a bound batch to b as key/value
// pairs.
func (w *shardWriter) encodeRows(b *pipeBatch, bb *boundBatch, lo, hi int) error {
	var err error
	for row := lo; row < hi; row++ {
		k0 := len(b.arena)
		b.arena = append(b.arena, w.prefix...)
		if b.arena, err = bb.key.appendKey(b.arena, row); err != nil {
			b.arena = b.arena[:k0]
			return fmt.Errorf("redis shard %d: row %d: %w", w.index, row, err)
		}
		k1 := len(b.arena)
		if b.arena, err = bb.appendRecord(b.arena, row); err != nil {
			key := string(b.arena[k0+len(w.prefix) : k1])
			b.arena = b.arena[:k0]
			return fmt.Errorf("redis shard %d: key %q (row %d): %w", w.index, key, row, err)
		}
		if len(b.arena) > math.MaxInt32 {
			return fmt.Errorf("redis shard %d: pipeline batch over 2 GiB; lower pipeline_batch", w.index)
		}
		b.spans = append(b.spans, span{int32(k0), int32(k1), int32(k1), int32(len(b.arena))})
	}
	return nil
}

// getBatch returns a recycled batch or a new one; at most 2×depth+1
// exist: depth being encoded (or waiting for a pipeline token), depth in
// flight, and the one Write fills inline.
func (w *shardWriter) getBatch() *pipeBatch {
	select {
	case b := <-w.free:
		b.reset()
		return b
	default:
	}
	if b := w.s.batches.get(); b != nil {
		return b
	}
	return &pipeBatch{spans: make([]span, 0, w.s.cfg.batch)}
}

// recycle keeps b for this attempt's next pipeline, or for the sink's
// other attempts when the attempt holds enough.
func (w *shardWriter) recycle(b *pipeBatch) {
	select {
	case w.free <- b:
	default:
		w.s.batches.put(b)
	}
}

// acquireEncoder takes an encoding token, waiting while depth pipelines
// are being encoded.
func (w *shardWriter) acquireEncoder(ctx context.Context) error { return w.take(ctx, w.encSem) }

// acquire takes a pipeline token, waiting while depth are in flight.
func (w *shardWriter) acquire(ctx context.Context) error { return w.take(ctx, w.sem) }

// take puts a token into sem, waiting until there is room, ctx ends or the
// attempt fails or closes.
func (w *shardWriter) take(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.ctx.Done():
		if err := w.failed(); err != nil {
			return err
		}
		return fmt.Errorf("redis shard %d: writer closed", w.index)
	}
}

// send writes b (holding a token) and then recycles it.
func (w *shardWriter) send(b *pipeBatch) {
	if w.keysKey != "" {
		b.buildKeyRecord(len(w.prefix))
	}
	err := w.s.sendBatch(w.ctx, b, w.keysKey, &w.retries, &w.noRetry)
	<-w.sem
	if err != nil {
		w.setErr(fmt.Errorf("redis shard %d: %w", w.index, err))
		return
	}
	w.rows.Add(int64(len(b.spans)))
	w.recycle(b)
}

// flush hands the current batch to a pipeline goroutine.
func (w *shardWriter) flush(ctx context.Context) error {
	b := w.cur
	if b == nil || len(b.spans) == 0 {
		return nil
	}
	if err := w.acquire(ctx); err != nil {
		return err
	}
	w.cur = nil
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.send(b)
	}()
	return w.failed()
}

func (w *shardWriter) setErr(err error) {
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
		w.cancel() // stop the other pipelines: the shard fails as a whole
	}
	w.errMu.Unlock()
}

func (w *shardWriter) failed() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("redis shard %d: writer already committed or aborted", w.index)
	}
	return nil
}

// Commit sends what is buffered and waits for every pipeline. Versioned
// keys stay invisible until Publish, and a retried shard rewrites the same
// keys, so waiting is all a commit needs.
func (w *shardWriter) Commit(ctx context.Context) error {
	if err := w.failed(); err != nil {
		w.Abort(ctx)
		return err
	}
	if err := w.flush(ctx); err != nil {
		w.Abort(ctx)
		return err
	}
	waited := make(chan struct{})
	go func() { w.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		w.noRetry.Store(true)
		w.cancel()
		<-waited
		w.finish()
		return fmt.Errorf("redis shard %d: commit: %w", w.index, ctx.Err())
	}
	err := w.failed()
	if err == nil {
		err = w.writeMarker(ctx)
	}
	w.finish()
	if err != nil {
		return err
	}
	w.s.log.Debug("redis shard committed", "shard", w.index, "rows", w.rows.Load(), "retries", w.retries.Load())
	return nil
}

// writeMarker records the commit in the version's shard markers (with the
// data's TTL), once every pipeline is acknowledged: the marker is what Stage
// checks, so it never exists for a shard whose records were not all
// written. It carries the servers' state from before the first write, so a
// restart or eviction during or after the writes is detected at Stage.
func (w *shardWriter) writeMarker(ctx context.Context) error {
	m, err := json.Marshal(Marker{Rows: w.rows.Load(), Nodes: w.nodes})
	if err != nil {
		return fmt.Errorf("redis shard %d: marker: %w", w.index, err)
	}
	err = w.s.retryDo(ctx, func(ctx context.Context) error {
		pipe := w.s.client.Pipeline()
		// The encoding goes with every marker too (Prepare records it
		// first): whichever wrote the version, its hash says how.
		pipe.HSet(ctx, w.shardsKey, ShardField(w.index), m, EncodingField, w.s.cfg.encoding)
		if w.s.cfg.ttl > 0 {
			pipe.PExpire(ctx, w.shardsKey, w.s.cfg.ttl)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return w.s.cfg.sanitize(fmt.Sprintf("shard %d: write commit marker in %s", w.index, w.shardsKey), err)
	}
	return nil
}

// retryDo runs fn, again with backoff while it fails transiently (fn must
// be idempotent).
func (s *Sink) retryDo(ctx context.Context, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || !isTransient(err) || attempt >= s.retry.attempts {
			return err
		}
		t := time.NewTimer(s.retry.backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		}
	}
}

// Abort discards the attempt: no pipeline is re-sent any more, and Abort
// waits (up to ctx) for those already sent, so that none of them can land
// after a retry of the shard has rewritten the same keys. What they wrote
// stays under the run's version, invisible, until a retry overwrites it or
// the run's Abort deletes it.
func (w *shardWriter) Abort(ctx context.Context) error {
	w.noRetry.Store(true)
	waited := make(chan struct{})
	go func() { w.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		w.cancel()
		<-waited
	}
	w.finish()
	return nil
}

func (w *shardWriter) finish() {
	w.cancel()
	w.errMu.Lock()
	w.done = true
	w.errMu.Unlock()
	w.cur = nil
	// Every pipeline has returned (Commit and Abort wait for them): the
	// attempt's batches go to the sink's pool for the next attempt.
	for {
		select {
		case b := <-w.free:
			w.s.batches.put(b)
			continue
		default:
		}
		break
	}
	w.s.release(w)
}

// sendBatch sends one pipeline of SETs (with the TTL), re-sending the whole
// pipeline on transient failures: SET is idempotent, so a re-send neither
// loses nor duplicates a record.
func (s *Sink) sendBatch(ctx context.Context, b *pipeBatch, keysKey string, retries *atomic.Int64, noRetry *atomic.Bool) error {
	var last error
	for attempt := 1; ; attempt++ {
		err := s.execSets(ctx, b, keysKey)
		if err == nil {
			return nil
		}
		last = err
		if !isTransient(err) || attempt >= s.retry.attempts || noRetry.Load() {
			break
		}
		retries.Add(1)
		delay := s.retry.backoff(attempt)
		s.log.Warn("redis pipeline failed; retrying", "attempt", attempt,
			"keys", len(b.spans), "delay", delay, "err", redact(err.Error(), s.cfg.password))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return s.cfg.sanitize("write pipeline", errors.Join(ctx.Err(), last))
		}
	}
	return s.cfg.sanitize(fmt.Sprintf("write pipeline of %d keys (first %q)", len(b.spans), b.key(0)), last)
}

// execSets runs one pipeline and returns the first failure, either of the
// exchange or of any single command. With a keysKey the pipeline first
// appends its keys to the version's key record (and refreshes its TTL), so
// that a key is recorded before it is written, even if the process dies:
// on one server the APPEND precedes the SETs on the same connection; on a
// cluster, where the SETs go to other nodes in parallel, the APPEND is
// acknowledged first, in a round trip of its own.
func (s *Sink) execSets(ctx context.Context, b *pipeBatch, keysKey string) error {
	pipe := s.client.Pipeline()
	if keysKey != "" {
		pipe.Append(ctx, keysKey, unsafe.String(unsafe.SliceData(b.keyRec), len(b.keyRec)))
		if s.cfg.ttl > 0 {
			pipe.PExpire(ctx, keysKey, s.cfg.ttl)
		}
		if _, cluster := s.client.(*goredis.ClusterClient); cluster {
			if err := execPipe(ctx, pipe); err != nil {
				return err
			}
			pipe = s.client.Pipeline()
		}
	}
	for i := range b.spans {
		pipe.Set(ctx, b.key(i), b.value(i), s.cfg.ttl)
	}
	return execPipe(ctx, pipe)
}

// execPipe runs pipe and returns the first failure, of the exchange or of
// any single command.
func execPipe(ctx context.Context, pipe goredis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// backoff is the delay before re-send attempt+1: exponential with full
// jitter in its upper half.
func (p retryPolicy) backoff(attempt int) time.Duration {
	d := p.base << min(attempt-1, 10)
	if d > p.max {
		d = p.max
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// logger returns the default logger tagged with the sink's name.
func logger() *slog.Logger { return slog.Default().With("sink", "redis") }
