package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/profile"
	"github.com/precog-ml/precog/runner/model"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sources"
)

// queueDepth bounds every queue between stages: with batch_size rows per
// item, memory is O(queueDepth × batch_size × row width), never dataset size.
const queueDepth = 2

// minReadRows is the most rows the pipeline reads, encodes, infers and
// writes as one unit: many model batches (Infer runs them batch_size rows
// at a time). Every stage pays per call (a Parquet page decode per column,
// an output record, a sink write per column), and at 1024 rows those costs
// were most of a cheap model's job: a null-model job spent 4x the CPU of a
// raw read-sum-write loop over the same files. A text model sorts the
// whole unit by token length, so its buckets pad less.
const minReadRows = 16384

// unitsPerShard is the fewest units a shard is cut into, so that its
// stages still overlap inside it (and a failure, progress or a cancel
// lands mid-shard as before on small shards).
const unitsPerShard = 4

// ReadRows is the rows per pipeline unit for a model.batch_size and a
// shard of shardRows rows (0: unknown): at most minReadRows, at most a
// quarter of the shard, at least one model batch. Memory stays
// O(queueDepth × ReadRows × row width), set by configuration.
func ReadRows(batchSize int, shardRows int64) int {
	unit := minReadRows
	if shardRows > 0 {
		unit = int(min(int64(unit), shardRows/unitsPerShard))
	}
	return max(batchSize, unit)
}

// RejectWriter receives the rows the encoder rejected (null or non-finite
// features) for one shard attempt; Commit makes them durable.
type RejectWriter interface {
	Reject(key, position, reason string) error
}

// ShardTask is one attempt of one shard.
type ShardTask struct {
	Run     sinks.RunInfo
	Shard   jobs.Shard
	Sinks   []sinks.Sink
	Rejects RejectWriter
	// ComputedAt stamps every record; the run's start time, so a resumed run
	// writes exactly what an uninterrupted one would.
	ComputedAt time.Time
	// OnRows is called with the source rows each batch consumed (progress).
	OnRows func(n int64)
	// Stats, when set, accumulates each stage's busy time.
	Stats *StageStats
	// BeforeCommit, when set, runs after every batch is written and before
	// any sink commits: the last check that the attempt still holds its
	// lease (a process frozen past its lease must not commit late).
	BeforeCommit func(ctx context.Context) error
	// Profile, when set, summarises every output batch for the checks
	// before the publish (the spec's checks: block).
	Profile *profile.Builder
}

type encoded struct {
	kept  keptRows
	batch *model.Batch
	// srcRows is the source rows the batch consumed (rejected keys included).
	srcRows int64
}

// ExecShard runs one shard attempt through read → encode → infer → write and
// commits every sink's writer. On any error every writer is aborted and
// nothing of this attempt is committed.
func (j *Job) ExecShard(ctx context.Context, t ShardTask) (jobs.Counts, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unit := ReadRows(j.Model.BatchRows(), t.Shard.EstRows)
	// Reuse: the pipeline copies features into tensors, keeps keys by
	// value and hands the key column to sinks, which release it after
	// writing; nothing holds a numeric slice past its record's release.
	rdr, err := j.Source.Open(ctx, t.Shard.Plan, sources.ReadOptions{Columns: j.Columns(), BatchSize: unit, Reuse: true})
	if err != nil {
		return jobs.Counts{}, fmt.Errorf("open: %w", err)
	}
	defer rdr.Close()
	p := &shardPipeline{j: j, t: t, rdr: rdr, cancel: cancel, unit: unit,
		guard: newKeyGuard(j.Spec.Source.Key, j.Spec.DuplicateKeys, t.Shard.EstRows), rejects: &syncRejects{w: t.Rejects}}
	if err := p.openWriters(ctx); err != nil {
		return jobs.Counts{}, err
	}
	if err := p.run(ctx); err != nil {
		p.abortAll(ctx)
		return p.counts, err
	}
	p.counts.KeySketch = p.guard.sketch.Encode()
	if t.BeforeCommit != nil {
		if err := t.BeforeCommit(ctx); err != nil {
			p.abortAll(ctx)
			return p.counts, err
		}
	}
	return p.counts, p.commit(ctx)
}

// shardPipeline is one shard attempt's stages and what they share: the
// reader, one writer per sink, the key guard, the rejects, the counts and
// the first error, which cancels every stage.
type shardPipeline struct {
	j       *Job
	t       ShardTask
	rdr     sources.BatchReader
	writers []sinks.ShardWriter
	guard   *keyGuard
	rejects *syncRejects
	cancel  context.CancelCauseFunc
	// unit is the rows read, encoded and inferred as one (ReadRows).
	unit int

	mu     sync.Mutex // counts
	counts jobs.Counts

	errOnce  sync.Once
	firstErr error
}

// fail records the attempt's first error and stops every stage.
func (p *shardPipeline) fail(err error) {
	p.errOnce.Do(func() { p.firstErr = err; p.cancel(err) })
}

// openWriters opens every sink's writer for the shard.
func (p *shardPipeline) openWriters(ctx context.Context) error {
	p.writers = make([]sinks.ShardWriter, 0, len(p.t.Sinks))
	for _, s := range p.t.Sinks {
		w, err := s.Shard(ctx, p.t.Run, p.t.Shard.Index)
		if err != nil {
			p.abortAll(ctx)
			return fmt.Errorf("sink %s: %w", s.Name(), err)
		}
		p.writers = append(p.writers, w)
	}
	return nil
}

// abortAll aborts every open writer, even when ctx is cancelled.
func (p *shardPipeline) abortAll(ctx context.Context) {
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer acancel()
	for _, w := range p.writers {
		_ = w.Abort(actx)
	}
}

// run wires the stages with bounded queues and waits for all of them: one
// read+encode goroutine, one infer goroutine per session, one writer per
// sink. It returns the first error, or the cancellation's cause.
func (p *shardPipeline) run(ctx context.Context) error {
	encCh := make(chan encoded, queueDepth)
	sinkChs := make([]chan arrow.RecordBatch, len(p.writers))
	for i := range sinkChs {
		sinkChs[i] = make(chan arrow.RecordBatch, queueDepth)
	}
	var wg, inferWG sync.WaitGroup
	outs := sinkChs
	if p.t.Profile != nil {
		// The checks' profile is one more consumer of the output records,
		// beside the sinks, so building it overlaps inference instead of
		// running in series with it.
		profCh := make(chan arrow.RecordBatch, queueDepth)
		outs = append(slices.Clip(sinkChs), profCh)
		wg.Go(func() { p.profile(ctx, profCh) })
	}
	wg.Go(func() { p.readEncode(ctx, encCh) })
	consts := newConstColumns(p.j.Output, p.t.Run, p.j.Model.Version(), p.t.ComputedAt, p.unit)
	defer consts.release()
	for range max(p.j.Model.Sessions(), 1) {
		inferWG.Go(func() { p.infer(ctx, encCh, outs, consts) })
	}
	go func() {
		inferWG.Wait()
		for _, ch := range outs {
			close(ch)
		}
	}()
	for i := range p.writers {
		wg.Go(func() { p.write(ctx, i, sinkChs[i]) })
	}
	wg.Wait()
	inferWG.Wait()
	if p.firstErr == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return p.firstErr
}

// readEncode is stage 1: read and encode. One goroutine, so reject
// positions resolve against the batch the reader returned last.
func (p *shardPipeline) readEncode(ctx context.Context, out chan<- encoded) {
	defer close(out)
	j, t := p.j, p.t
	for {
		start := time.Now()
		rec, err := p.rdr.Next(ctx)
		t.Stats.add(StageRead, time.Since(start))
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			p.fail(fmt.Errorf("read: %w", err))
			return
		}
		kept, keyRejects, err := p.guard.check(rec, j.keyIndexIn(rec), p.rdr.Locate(), p.rejects)
		rows := rec.NumRows()
		rec.Release()
		if err != nil {
			p.fail(err)
			return
		}
		start = time.Now()
		b, err := j.Model.Encode(kept.rec)
		t.Stats.add(StageEncode, time.Since(start))
		if err != nil {
			kept.rec.Release()
			p.fail(fmt.Errorf("encode: %w", err))
			return
		}
		keys := kept.rec.Column(j.keyIndexIn(kept.rec))
		for _, r := range b.Rejects {
			if err := p.rejects.Reject(keyString(keys, r.Row), kept.source(r.Row), r.Reason); err != nil {
				b.Release()
				kept.rec.Release()
				p.fail(fmt.Errorf("rejects: %w", err))
				return
			}
		}
		p.mu.Lock()
		p.counts.RowsIn += rows
		p.counts.Rejected += int64(len(b.Rejects) + keyRejects)
		p.mu.Unlock()
		select {
		case out <- encoded{kept: kept, batch: b, srcRows: rows}:
		case <-ctx.Done():
			b.Release()
			kept.rec.Release()
			return
		}
	}
}

// infer is stage 2 (one goroutine per session): infer each encoded batch,
// assemble its output record and hand it to every sink's queue.
func (p *shardPipeline) infer(ctx context.Context, in <-chan encoded, outs []chan arrow.RecordBatch, consts *constColumns) {
	t := p.t
	for e := range in {
		start := time.Now()
		out, bad, err := p.j.inferBatch(ctx, e, consts, p.rejects)
		t.Stats.add(StageInfer, time.Since(start))
		rows := e.srcRows
		e.batch.Release()
		e.kept.rec.Release()
		if err != nil {
			p.fail(err)
			continue // drain in so stage 1 never blocks
		}
		if t.OnRows != nil {
			t.OnRows(rows)
		}
		if out == nil {
			continue
		}
		p.mu.Lock()
		p.counts.RowsOut += out.NumRows()
		p.counts.Rejected += int64(bad)
		p.mu.Unlock()
		for _, ch := range outs {
			out.Retain()
			select {
			case ch <- out:
			case <-ctx.Done():
				out.Release()
			}
		}
		out.Release()
	}
}

// profile adds each output record to the checks' profile (stage 3 beside
// the writers); after a failure it drains its queue.
func (p *shardPipeline) profile(ctx context.Context, in <-chan arrow.RecordBatch) {
	for rec := range in {
		if ctx.Err() == nil {
			p.t.Profile.Add(rec, 0)
		}
		rec.Release()
	}
}

// write is stage 3 for sink i: its own goroutine, so sinks overlap each
// other. After a failure it drains its queue without writing.
func (p *shardPipeline) write(ctx context.Context, i int, in <-chan arrow.RecordBatch) {
	w, name := p.writers[i], p.t.Sinks[i].Name()
	stage := "write " + name
	for rec := range in {
		if ctx.Err() == nil {
			start := time.Now()
			if err := w.Write(ctx, rec); err != nil {
				p.fail(fmt.Errorf("sink %s: write: %w", name, err))
			}
			p.t.Stats.add(stage, time.Since(start))
		}
		rec.Release()
	}
}

// commit commits every writer in order. Writers committed before a failing
// one hold a complete copy of the shard, which the retry replaces, so
// aborting the rest suffices.
func (p *shardPipeline) commit(ctx context.Context) error {
	stopMidShard(p.t.Shard.Index)
	for i, w := range p.writers {
		start := time.Now()
		err := w.Commit(ctx)
		p.t.Stats.add("write "+p.t.Sinks[i].Name(), time.Since(start))
		if err != nil {
			for _, rest := range p.writers[i+1:] {
				_ = rest.Abort(context.WithoutCancel(ctx))
			}
			return fmt.Errorf("sink %s: commit: %w", p.t.Sinks[i].Name(), err)
		}
	}
	return nil
}

// syncRejects serializes a shard's rejects: stage 1 rejects bad keys and
// features, the inference goroutines reject bad outputs.
type syncRejects struct {
	mu sync.Mutex
	w  RejectWriter
}

func (s *syncRejects) Reject(key, position, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Reject(key, position, reason)
}

// keyIndexIn finds the key column in a projected record.
func (j *Job) keyIndexIn(rec arrow.RecordBatch) int {
	idx := rec.Schema().FieldIndices(j.Spec.Source.Key)
	if len(idx) == 0 {
		return 0
	}
	return idx[0]
}

// inferBatch runs the model on one encoded batch and assembles the output
// record (key, outputs, model_version, computed_at, params). Rows whose
// outputs are NaN or ±Inf become rejects and are left out; bad counts them.
// It returns nil when no row of the batch is left.
func (j *Job) inferBatch(ctx context.Context, e encoded, consts *constColumns, rejects RejectWriter) (out arrow.RecordBatch, bad int, err error) {
	n := len(e.batch.Rows)
	if n == 0 {
		return nil, 0, nil
	}
	outs, err := j.Model.Infer(ctx, e.batch)
	if err != nil {
		return nil, 0, fmt.Errorf("infer: %w", err)
	}
	defer outs.Release()
	keys, err := gatherKeys(e.kept.rec.Column(j.keyIndexIn(e.kept.rec)), e.batch.Rows, int(e.kept.rec.NumRows()))
	if err != nil {
		return nil, 0, err
	}
	defer keys.Release()
	cols := make([]arrow.Array, 0, j.Output.NumFields())
	cols = append(cols, keys)
	cols = append(cols, outs.Columns()...)
	tail := consts.slice(n)
	cols = append(cols, tail...)
	rec := array.NewRecordBatch(j.Output, cols, int64(n))
	for _, a := range tail {
		a.Release()
	}
	badRows := nonFinite(rec, 1, 1+int(outs.NumCols()))
	if len(badRows) == 0 {
		return rec, 0, nil
	}
	defer rec.Release()
	drop := make([]int, len(badRows))
	for i, b := range badRows {
		drop[i] = b.row
		if err := rejects.Reject(keyString(keys, b.row), e.kept.source(e.batch.Rows[b.row]), b.reason); err != nil {
			return nil, 0, fmt.Errorf("rejects: %w", err)
		}
	}
	if len(drop) == n {
		return nil, len(drop), nil
	}
	kept, _, err := dropRows(rec, drop)
	return kept, len(drop), err
}

// gatherKeys returns the key column restricted to the kept rows, as String
// or Int64 (the output key types).
func gatherKeys(col arrow.Array, rows []int, total int) (arrow.Array, error) {
	all := len(rows) == total
	switch c := col.(type) {
	case *array.String:
		if all {
			c.Retain()
			return c, nil
		}
		b := array.NewStringBuilder(memory.DefaultAllocator)
		b.Reserve(len(rows))
		for _, r := range rows {
			b.Append(c.Value(r))
		}
		return b.NewArray(), nil
	case *array.Int64:
		if all {
			c.Retain()
			return c, nil
		}
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.Reserve(len(rows))
		for _, r := range rows {
			b.UnsafeAppend(c.Value(r))
		}
		return b.NewArray(), nil
	}
	if isStringKey(col.DataType()) {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		b.Reserve(len(rows))
		for _, r := range rows {
			b.Append(keyString(col, r))
		}
		return b.NewArray(), nil
	}
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.Reserve(len(rows))
	for _, r := range rows {
		v, err := keyInt(col, r)
		if err != nil {
			b.Release()
			return nil, err
		}
		b.UnsafeAppend(v)
	}
	return b.NewArray(), nil
}
