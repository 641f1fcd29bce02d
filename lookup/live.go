package lookup

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/singleflight"

	"github.com/precog-ml/precog/runner/model"
)

// LiveModel is what live inference needs from a loaded model. The default
// (Config.LoadModel nil) wraps runner/model, the same code the batch job
// runs, so a live prediction equals the precomputed one.
type LiveModel interface {
	// Version is the model version stored with every record.
	Version() string
	// Info describes the model's inputs (types and shapes) for request checks.
	Info() model.Info
	// Predict scores rec, whose columns are the job's key column and the
	// source columns its model spec reads. It returns one column per stored
	// output field, named by field, with rows aligned to rec; rejected[i]
	// is non-empty when row i was rejected (the reason).
	Predict(ctx context.Context, rec arrow.RecordBatch) (out arrow.RecordBatch, rejected []string, err error)
	// Close frees the model's sessions.
	Close() error
}

// liveResult is one row's live prediction: the stored-record JSON (fields,
// model_version, computed_at) or why it failed.
type liveResult struct {
	rec []byte
	err error
}

// live runs live inference for one namespace: singleflight per (key,
// inputs), then the dynamic batcher merges different keys into one run.
type live struct {
	ns      string
	layout  *layout
	model   LiveModel
	batcher *model.Batcher[row, liveResult]
	flight  singleflight.Group
	seed    maphash.Seed
	onBatch func(n int)
	timeout time.Duration // bounds a shared inference its callers left
}

// liveBatching is how a namespace's live inferences are batched: at most
// maxBatch rows a run, waiting at most maxWait (adaptive) for more,
// concurrency runs at once; timeout bounds a shared inference its callers
// left, and onBatch observes each run's size.
type liveBatching struct {
	maxBatch, concurrency int
	maxWait, timeout      time.Duration
	onBatch               func(int)
}

func newLive(ns string, l *layout, m LiveModel, b liveBatching) *live {
	lv := &live{ns: ns, layout: l, model: m, seed: maphash.MakeSeed(), onBatch: b.onBatch, timeout: b.timeout}
	lv.batcher = model.NewBatcher(b.maxBatch, b.maxWait, lv.run,
		model.WithConcurrency(b.concurrency), model.WithQueue(4*b.maxBatch*b.concurrency), model.WithAdaptiveWait())
	return lv
}

// predict returns the record JSON for r. Concurrent calls for the same key
// and inputs share one inference.
func (lv *live) predict(ctx context.Context, r row) ([]byte, error) {
	var h maphash.Hash
	h.SetSeed(lv.seed)
	for _, v := range r.vals {
		for _, f := range v {
			var b [8]byte
			u := math.Float64bits(f)
			for i := range b {
				b[i] = byte(u >> (8 * i))
			}
			_, _ = h.Write(b[:])
		}
		_ = h.WriteByte(0xff)
	}
	for _, s := range r.strs {
		_, _ = h.WriteString(s)
		_ = h.WriteByte(0xfe)
	}
	id := r.key + "\x00" + strconv.FormatUint(h.Sum64(), 16)
	ch := lv.flight.DoChan(id, func() (any, error) {
		// The shared call must not die with the first caller's context:
		// others may still wait. The batcher drops it once all are gone.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lv.timeout)
		defer cancel()
		res, err := lv.batcher.Do(sctx, r)
		if err != nil {
			return nil, err
		}
		return res.rec, res.err
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]byte), nil
	}
}

// run is the batcher's function: one Arrow record for the batch, one
// inference, one JSON record per row.
func (lv *live) run(ctx context.Context, rows []row) ([]liveResult, error) {
	if lv.onBatch != nil {
		lv.onBatch(len(rows))
	}
	rec := lv.layout.record(memory.DefaultAllocator, rows)
	defer rec.Release()
	out, rejected, err := lv.model.Predict(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("live inference for %s (%d rows): %w", lv.ns, len(rows), err)
	}
	defer out.Release()
	if int(out.NumRows()) != len(rows) {
		return nil, fmt.Errorf("live inference for %s: %d output rows for %d inputs", lv.ns, out.NumRows(), len(rows))
	}
	computedAt := strconv.AppendQuote(nil, time.Now().UTC().Format(time.RFC3339Nano))
	version := strconv.AppendQuote(nil, lv.model.Version())
	res := make([]liveResult, len(rows))
	for i := range rows {
		if i < len(rejected) && rejected[i] != "" {
			res[i].err = badf("key %q: inputs rejected: %s", rows[i].key, rejected[i])
			continue
		}
		b := []byte{'{'}
		for c := 0; c < int(out.NumCols()); c++ {
			b = strconv.AppendQuote(b, out.ColumnName(c))
			b = append(b, ':')
			if b, err = arrowJSON(b, out.Column(c), i); err != nil {
				res[i].err = fmt.Errorf("key %q: output %s: %w", rows[i].key, out.ColumnName(c), err)
				break
			}
			b = append(b, ',')
		}
		if res[i].err != nil {
			continue
		}
		b = append(b, `"model_version":`...)
		b = append(b, version...)
		b = append(b, `,"computed_at":`...)
		b = append(b, computedAt...)
		res[i].rec = append(b, '}')
	}
	return res, nil
}

// release stops the batcher (running batches finish) and frees the model.
func (lv *live) release() error {
	_ = lv.batcher.Close()
	return lv.model.Close()
}

// rowFromFeatures builds a live row from a features-table row, nil when a
// feature is missing or NULL (the key then has no live prediction).
func (l *layout) rowFromFeatures(key string, feats map[string]any) (row, error) {
	r := row{key: key, vals: make([][]float64, len(l.cols))}
	if hasText(l) {
		if err := l.textFromFeatures(key, feats, &r); err != nil {
			return row{}, err
		}
	}
	for i, c := range l.cols {
		if c.text {
			continue
		}
		v, ok := feats[c.name]
		if !ok {
			return row{}, fmt.Errorf("features table has no column %q", c.name)
		}
		fs, ok := pgFloats(v)
		if !ok {
			return row{}, fmt.Errorf("feature %q of key %q is NULL or not numeric", c.name, key)
		}
		if !c.list && len(fs) != 1 {
			return row{}, fmt.Errorf("feature %q of key %q: want a number, got %d", c.name, key, len(fs))
		}
		if c.list && ((c.width >= 0 && len(fs) != c.width) || len(fs) == 0) {
			return row{}, fmt.Errorf("feature %q of key %q: want %s, got %d", c.name, key, widthText(c.width), len(fs))
		}
		for _, f := range fs {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return row{}, fmt.Errorf("feature %q of key %q is not finite", c.name, key)
			}
		}
		r.vals[i] = fs
	}
	return r, nil
}
