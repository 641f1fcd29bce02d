package lookup

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/jsontext"
	"github.com/precog-ml/precog/jobs"
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

// live runs live inference for one namespace: the dynamic batcher merges
// concurrent rows into one run, identical rows inferred once.
type live struct {
	ns      string
	layout  *layout
	model   LiveModel
	batcher *model.Batcher[row, liveResult]
	onBatch func(n int)
}

// liveBatching is how a namespace's live inferences are batched: at most
// maxBatch rows a run, waiting at most maxWait (adaptive) for more,
// concurrency runs at once; onBatch observes each run's size. A run whose
// callers all left is cancelled (the batcher watches their contexts).
type liveBatching struct {
	maxBatch, concurrency int
	maxWait               time.Duration
	onBatch               func(int)
}

func newLive(ns string, l *layout, m LiveModel, b liveBatching) *live {
	lv := &live{ns: ns, layout: l, model: m, onBatch: b.onBatch}
	lv.batcher = model.NewBatcher(b.maxBatch, b.maxWait, lv.run,
		model.WithConcurrency(b.concurrency), model.WithQueue(4*b.maxBatch*b.concurrency), model.WithAdaptiveWait())
	return lv
}

// predict returns the record JSON for r. The row joins the next batch as
// it is: no goroutine, context or map of its own (a singleflight per
// request cost more than the HTTP parse). Identical concurrent rows (same
// key and inputs) that land in one batch are inferred once (run).
func (lv *live) predict(ctx context.Context, r row) ([]byte, error) {
	res, err := lv.batcher.Do(ctx, r)
	if err != nil {
		return nil, err
	}
	return res.rec, res.err
}

// sameRow reports whether a and b are the same key with the same inputs.
func sameRow(a, b row) bool {
	if a.key != b.key || len(a.vals) != len(b.vals) || len(a.strs) != len(b.strs) {
		return false
	}
	for i := range a.vals {
		if len(a.vals[i]) != len(b.vals[i]) {
			return false
		}
		for j, f := range a.vals[i] {
			if math.Float64bits(f) != math.Float64bits(b.vals[i][j]) {
				return false
			}
		}
	}
	for i := range a.strs {
		if a.strs[i] != b.strs[i] {
			return false
		}
	}
	return true
}

// dedupRows returns the distinct rows of rows and, when some repeat, the
// index in it of each row (nil when all are distinct: uniq is rows).
func dedupRows(rows []row) (uniq []row, at []int) {
	if len(rows) < 2 {
		return rows, nil
	}
	seen := make(map[string]struct{}, len(rows))
	repeats := false
	for _, r := range rows {
		if _, ok := seen[r.key]; ok {
			repeats = true
			break
		}
		seen[r.key] = struct{}{}
	}
	if !repeats {
		return rows, nil
	}
	// Some key repeats: one entry per distinct row.
	at = make([]int, len(rows))
	uniq = make([]row, 0, len(rows))
	byKey := make(map[string][]int, len(rows)) // key → indexes in uniq
	for i, r := range rows {
		found := -1
		for _, u := range byKey[r.key] {
			if sameRow(uniq[u], r) {
				found = u
				break
			}
		}
		if found < 0 {
			found = len(uniq)
			uniq = append(uniq, r)
			byKey[r.key] = append(byKey[r.key], found)
		}
		at[i] = found
	}
	return uniq, at
}

// run is the batcher's function: one Arrow record for the batch's
// distinct rows, one inference, one JSON record per row, all built in one
// buffer.
func (lv *live) run(ctx context.Context, rows []row) ([]liveResult, error) {
	if lv.onBatch != nil {
		lv.onBatch(len(rows))
	}
	uniq, at := dedupRows(rows)
	rec := lv.layout.record(memory.DefaultAllocator, uniq)
	defer rec.Release()
	out, rejected, err := lv.model.Predict(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("live inference for %s (%d rows): %w", lv.ns, len(uniq), err)
	}
	defer out.Release()
	if int(out.NumRows()) != len(uniq) {
		return nil, fmt.Errorf("live inference for %s: %d output rows for %d inputs", lv.ns, out.NumRows(), len(uniq))
	}
	var tail []byte
	tail = append(jsontext.AppendString(tail, jobs.ColModelVersion), ':')
	tail = jsontext.AppendString(tail, lv.model.Version())
	tail = append(jsontext.AppendString(append(tail, ','), jobs.ColComputedAt), ':')
	tail = jsontext.AppendString(tail, time.Now().UTC().Format(time.RFC3339Nano))
	tail = append(tail, '}')
	recs := make([]liveResult, len(uniq))
	ends := make([]int, len(uniq)) // each record's end in buf
	var buf []byte
	for i := range uniq {
		start := len(buf)
		if i < len(rejected) && rejected[i] != "" {
			recs[i].err = badf("key %q: inputs rejected: %s", uniq[i].key, rejected[i])
			ends[i] = start
			continue
		}
		if i == 1 {
			// The first record tells the size of the others.
			buf = slices.Grow(buf, len(uniq)*len(buf))
		}
		buf = append(buf, '{')
		for c := 0; c < int(out.NumCols()); c++ {
			buf = strconv.AppendQuote(buf, out.ColumnName(c))
			buf = append(buf, ':')
			if buf, err = arrowJSON(buf, out.Column(c), i); err != nil {
				recs[i].err = fmt.Errorf("key %q: output %s: %w", uniq[i].key, out.ColumnName(c), err)
				break
			}
			buf = append(buf, ',')
		}
		if recs[i].err != nil {
			buf = buf[:start]
		} else {
			buf = append(buf, tail...)
		}
		ends[i] = len(buf)
	}
	start := 0
	for i := range recs {
		if recs[i].err == nil {
			// Capped: a reader that appends copies instead of
			// overwriting the next record.
			recs[i].rec = buf[start:ends[i]:ends[i]]
		}
		start = ends[i]
	}
	if at == nil {
		return recs, nil
	}
	res := make([]liveResult, len(rows))
	for i, u := range at {
		res[i] = recs[u]
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
