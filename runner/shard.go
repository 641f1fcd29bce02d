package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/profile"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sources"
)

// queueDepth bounds every queue between stages: with batch_size rows per
// item, memory is O(queueDepth × batch_size × row width), never dataset size.
const queueDepth = 2

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

	rdr, err := j.Source.Open(ctx, t.Shard.Plan, sources.ReadOptions{Columns: j.Columns(), BatchSize: j.Spec.Model.BatchSize})
	if err != nil {
		return jobs.Counts{}, fmt.Errorf("open: %w", err)
	}
	defer rdr.Close()

	writers := make([]sinks.ShardWriter, 0, len(t.Sinks))
	abortAll := func() {
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer acancel()
		for _, w := range writers {
			_ = w.Abort(actx)
		}
	}
	for _, s := range t.Sinks {
		w, err := s.Shard(ctx, t.Run, t.Shard.Index)
		if err != nil {
			abortAll()
			return jobs.Counts{}, fmt.Errorf("sink %s: %w", s.Name(), err)
		}
		writers = append(writers, w)
	}

	guard := newKeyGuard(j.Spec.Source.Key, j.Spec.DuplicateKeys)
	rejects := &syncRejects{w: t.Rejects}
	var (
		counts   jobs.Counts
		countsMu sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel(err) })
	}

	encCh := make(chan encoded, queueDepth)
	sinkChs := make([]chan arrow.RecordBatch, len(writers))
	for i := range sinkChs {
		sinkChs[i] = make(chan arrow.RecordBatch, queueDepth)
	}

	// Stage 1: read and encode. One goroutine, so reject positions resolve
	// against the batch the reader returned last.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(encCh)
		for {
			start := time.Now()
			rec, err := rdr.Next(ctx)
			t.Stats.add(StageRead, time.Since(start))
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				fail(fmt.Errorf("read: %w", err))
				return
			}
			kept, keyRejects, err := guard.check(rec, j.keyIndexIn(rec), rdr.Locate(), rejects)
			rows := rec.NumRows()
			rec.Release()
			if err != nil {
				fail(err)
				return
			}
			start = time.Now()
			b, err := j.Model.Encode(kept.rec)
			t.Stats.add(StageEncode, time.Since(start))
			if err != nil {
				kept.rec.Release()
				fail(fmt.Errorf("encode: %w", err))
				return
			}
			keys := kept.rec.Column(j.keyIndexIn(kept.rec))
			for _, r := range b.Rejects {
				if err := rejects.Reject(keyString(keys, r.Row), kept.source(r.Row), r.Reason); err != nil {
					b.Release()
					kept.rec.Release()
					fail(fmt.Errorf("rejects: %w", err))
					return
				}
			}
			countsMu.Lock()
			counts.RowsIn += rows
			counts.Rejected += int64(len(b.Rejects) + keyRejects)
			countsMu.Unlock()
			select {
			case encCh <- encoded{kept: kept, batch: b, srcRows: rows}:
			case <-ctx.Done():
				b.Release()
				kept.rec.Release()
				return
			}
		}
	}()

	// Stage 2: infer, one goroutine per session, and assemble output records.
	consts := newConstColumns(j.Output, t.Run, j.Model.Version(), t.ComputedAt, j.Spec.Model.BatchSize)
	defer consts.release()
	var inferWG sync.WaitGroup
	sessions := max(j.Spec.Model.Sessions, 1)
	for range sessions {
		inferWG.Add(1)
		go func() {
			defer inferWG.Done()
			for e := range encCh {
				start := time.Now()
				out, bad, err := j.inferBatch(ctx, e, consts, rejects)
				t.Stats.add(StageInfer, time.Since(start))
				rows := e.srcRows
				e.batch.Release()
				e.kept.rec.Release()
				if err != nil {
					fail(err)
					continue // drain encCh so stage 1 never blocks
				}
				if t.OnRows != nil {
					t.OnRows(rows)
				}
				if out == nil {
					continue
				}
				if t.Profile != nil {
					t.Profile.Add(out, 0)
				}
				countsMu.Lock()
				counts.RowsOut += out.NumRows()
				counts.Rejected += int64(bad)
				countsMu.Unlock()
				for _, ch := range sinkChs {
					out.Retain()
					select {
					case ch <- out:
					case <-ctx.Done():
						out.Release()
					}
				}
				out.Release()
			}
		}()
	}
	go func() {
		inferWG.Wait()
		for _, ch := range sinkChs {
			close(ch)
		}
	}()

	// Stage 3: one writer goroutine per sink, so sinks overlap each other.
	for i, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stage := "write " + t.Sinks[i].Name()
			for rec := range sinkChs[i] {
				if ctx.Err() == nil {
					start := time.Now()
					if err := w.Write(ctx, rec); err != nil {
						fail(fmt.Errorf("sink %s: write: %w", t.Sinks[i].Name(), err))
					}
					t.Stats.add(stage, time.Since(start))
				}
				rec.Release()
			}
		}()
	}
	wg.Wait()
	inferWG.Wait()

	if firstErr == nil && ctx.Err() != nil {
		firstErr = context.Cause(ctx)
	}
	if firstErr != nil {
		abortAll()
		return counts, firstErr
	}
	counts.KeySketch = guard.sketch.Encode()
	if t.BeforeCommit != nil {
		if err := t.BeforeCommit(ctx); err != nil {
			abortAll()
			return counts, err
		}
	}
	for i, w := range writers {
		start := time.Now()
		err := w.Commit(ctx)
		t.Stats.add("write "+t.Sinks[i].Name(), time.Since(start))
		if err != nil {
			// Writers committed before this one hold a complete copy of the
			// shard; the retry replaces it, so aborting the rest suffices.
			for _, rest := range writers[i+1:] {
				_ = rest.Abort(context.WithoutCancel(ctx))
			}
			return counts, fmt.Errorf("sink %s: commit: %w", t.Sinks[i].Name(), err)
		}
	}
	return counts, nil
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
