package model

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model/tokenizer"
)

// Text models (sentence embedders): a text input holds the token ids of a
// string column, tokenized with the model's tokenizer.json; its attention
// mask and token type ids are derived inputs. Infer sorts all the rows it
// is given by token length (the pipeline hands it many model batches at
// once, so the sort spans a window of them) and runs them in buckets sized
// by tokens for the device, each padded to its own longest row instead of
// max_length, then puts the outputs back in row order. A [N,T,D] output
// (last_hidden_state) is pooled over the mask (mean, cls or max) into a
// [N,D] list field, optionally L2-normalized: by nodes appended to the
// graph where it can take them (graphpool.go), else in Go.

// Bucket sizes, in padded tokens (rows × the bucket's longest row): a
// bucket takes length-sorted rows until the next would pass its device's
// budget, and at most model.batch_size rows. Sized by tokens, a bucket of
// short titles holds many rows and one of long texts few, so every run
// costs about the same. The CPU budget is the 64 rows × 128 tokens of the
// fixed 64-row buckets before; a GPU's is PyTorch's batch of 1024 × 128.
const (
	cpuBucketTokens = 64 * 128
	gpuBucketTokens = 1024 * 128
)

// bucketRows is the most rows of one bucket when model.batch_size is unset.
const bucketRows = jobs.DefaultBatchSize

// textInput is a tokenized text input.
type textInput struct {
	columns   []string
	tok       *tokenizer.Tokenizer
	maxLength int
}

func (m *Model) bindTextInput(t TensorInfo, is jobs.InputSpec) error {
	f := "model.inputs." + t.Name
	if !t.Tensor {
		return m.errorf(f, "input %q is %s, not a tensor", t.Name, t.Type)
	}
	kind, ok := kindOf(t.Type)
	if !ok || (kind != kindInt64 && kind != kindInt32) {
		return m.errorf(f, "input %q has element type %s; token ids, masks and type ids feed int64 or int32 inputs", t.Name, t.Type)
	}
	if t.Shape != nil && len(t.Shape) != 2 {
		return m.errorf(f, "input %q has shape %s; a text input is [N,T]", t.Name, shapeString(t))
	}
	in := &input{name: t.Name, kind: kind, rank: 2, width: -1, shape: t.Shape, textOf: -1}
	switch {
	case len(is.Text) > 0:
		tok, err := tokenizer.Load(is.Tokenizer)
		if err != nil {
			return m.errorf(f+".tokenizer", "%v", err)
		}
		ml := is.MaxLength
		if ml == 0 {
			ml = jobs.DefaultMaxLength
		}
		if len(t.Shape) == 2 && t.Shape[1] > 0 {
			return m.errorf(f, "input %q has a static length %s; precog pads each bucket to its longest row and needs a dynamic one", t.Name, shapeString(t))
		}
		if m.hasText {
			return m.errorf(f, "a second text input; precog feeds one text input per model (join columns with text: [a, b])")
		}
		m.hasText = true
		in.text = &textInput{columns: is.Text, tok: tok, maxLength: ml}
	case is.MaskOf != "":
		in.derived, in.list = "mask", is.MaskOf // list holds the name until linked
	default:
		in.derived, in.list = "zeros", is.ZerosLike
	}
	m.inputs = append(m.inputs, in)
	return nil
}

// linkTextInputs points each mask_of / zeros_like input at its text input.
func (m *Model) linkTextInputs() error {
	for _, in := range m.inputs {
		if in.derived == "" {
			continue
		}
		ref := in.list
		in.list = ""
		for j, other := range m.inputs {
			if other.name == ref && other.text != nil {
				in.textOf = j
			}
		}
		if in.textOf < 0 {
			field := "mask_of"
			if in.derived == "zeros" {
				field = "zeros_like"
			}
			return m.errorf("model.inputs."+in.name+"."+field, "%q is not a text input", ref)
		}
	}
	if m.hasText && m.fixedBatch > 0 {
		return m.errorf("model.inputs", "a text model needs a dynamic batch dimension")
	}
	for _, in := range m.inputs {
		if m.hasText && in.text == nil && in.derived == "" {
			return m.errorf("model.inputs."+in.name, "column inputs next to a text input are not supported: a text model's inputs are text, mask_of and zeros_like")
		}
	}
	return nil
}

// bindPooled accepts a [N,T,D] float output when model.pooling reduces it.
func (m *Model) bindPooled(o *output, t TensorInfo) error {
	f := "model.outputs." + t.Name
	if !m.spec.Pooling.Reduces() {
		return m.errorf(f, "output %q has shape %s; set model.pooling (mean, cls or max) to store it as one vector per row", t.Name, shapeString(t))
	}
	if !m.hasText {
		return m.errorf("model.pooling", "pooling needs a text input (its attention mask)")
	}
	if o.kind != kindFloat32 {
		return m.errorf(f, "output %q is %s; pooling reads float32", t.Name, o.kind)
	}
	o.pool, o.list, o.width = true, true, int(t.Shape[2])
	return nil
}

// TextInfo describes a model's text input for `precog validate`.
type TextInfo struct {
	Input, Kind string
	Columns     []string
	VocabSize   int
	MaxLength   int
	// BucketTokens and BucketRows bound one bucket: padded tokens, rows.
	BucketTokens, BucketRows int
}

// Text describes the text input; ok is false for models without one.
func (m *Model) Text() (TextInfo, bool) {
	for _, in := range m.inputs {
		if in.text != nil {
			return TextInfo{Input: in.name, Kind: in.text.tok.Kind(), Columns: in.text.columns,
				VocabSize: in.text.tok.VocabSize(), MaxLength: in.text.maxLength,
				BucketTokens: m.bucketTokens(), BucketRows: m.bucketMaxRows()}, true
		}
	}
	return TextInfo{}, false
}

// encodeText tokenizes every row of the text input's columns into bufs;
// a null or empty text rejects its row. Derived inputs have nothing to read.
func (m *Model) encodeText(rec arrow.RecordBatch, in *input, bufs *batchBufs, reject func(row int, col, reason string)) error {
	if in.text == nil {
		return nil
	}
	schema := rec.Schema()
	cols := make([]stringArray, len(in.text.columns))
	for j, c := range in.text.columns {
		path := fmt.Sprintf("model.inputs.%s.text[%d]", in.name, j)
		idx := schema.FieldIndices(c)
		if len(idx) == 0 {
			return fmt.Errorf("%s: column %q not in batch (have: %s)", path, c, compressNames(fieldNames(schema)))
		}
		a, ok := rec.Column(idx[0]).(stringArray)
		if !ok {
			return m.errorf(path, "column %q is %s, want strings for text input %q", c, rec.Column(idx[0]).DataType(), in.name)
		}
		cols[j] = a
	}
	n := int(rec.NumRows())
	bufs.tokOff = grow(bufs.tokOff, n+1)
	bufs.tokIDs = bufs.tokIDs[:0]
	var joined strings.Builder
	for r := range n {
		bufs.tokOff[r] = len(bufs.tokIDs)
		text, col, ok := "", "", true
		if len(cols) == 1 {
			if cols[0].IsNull(r) {
				reject(r, in.text.columns[0], "column "+in.text.columns[0]+": null")
				continue
			}
			text, col = cols[0].Value(r), in.text.columns[0]
		} else {
			joined.Reset()
			for j, a := range cols {
				if a.IsNull(r) {
					reject(r, in.text.columns[j], "column "+in.text.columns[j]+": null")
					ok = false
					break
				}
				if j > 0 {
					joined.WriteByte(' ')
				}
				joined.WriteString(a.Value(r))
			}
			text, col = joined.String(), strings.Join(in.text.columns, "+")
		}
		if !ok {
			continue
		}
		if strings.TrimSpace(text) == "" {
			reject(r, col, "column "+col+": empty text")
			continue
		}
		bufs.tokIDs = in.text.tok.Encode(bufs.tokIDs, text, in.text.maxLength)
	}
	bufs.tokOff[n] = len(bufs.tokIDs)
	return nil
}

// inferText runs a text model's kept rows in length buckets and returns
// the outputs in row order.
func (m *Model) inferText(ctx context.Context, b *Batch) (arrow.RecordBatch, error) {
	n := len(b.Rows)
	bufs := b.bufs
	tokens := func(k int) []int32 { r := b.Rows[k]; return bufs.tokIDs[bufs.tokOff[r]:bufs.tokOff[r+1]] }
	lens := make([]int, n)
	for k := range lens {
		lens[k] = len(tokens(k))
	}
	order := lengthOrder(lens)

	collectors := make([]collector, len(m.outputs))
	for i, o := range m.outputs {
		switch {
		case o.pool && !o.inGraph:
			collectors[i] = &poolCollector{o: o, mode: m.spec.Pooling}
		case o.pool:
			collectors[i] = &typedCollector[float32]{o: o, width: o.width}
		case o.kind == kindFloat32 || o.kind == kindFloat64 || o.kind == kindInt32 || o.kind == kindInt64:
			collectors[i] = newCollector(o)
		default:
			return nil, fmt.Errorf("model %s: output %q: %s outputs are not supported with text inputs", m.spec.Path, o.name, o.kind)
		}
	}
	s, err := m.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("model %s: wait for a session: %w", m.spec.Path, err)
	}
	// Each bucket's outputs are taken (pooled over their tokens, copied
	// out) by a goroutine of their own while the session runs the next
	// bucket: pooling a 64-row bucket's hidden states costs a good part of
	// a run, and with it in line a session of many intra-op threads sat
	// idle through it.
	taken := make(chan bucketOutputs, 1)
	takeErr := make(chan error, 1)
	go func() { takeErr <- m.takeBuckets(collectors, taken) }()
	runErr := m.runBuckets(ctx, s, b, order, lens, taken)
	m.release(s) // the last bucket's pooling needs no session
	close(taken)
	err = <-takeErr
	if runErr != nil {
		return nil, runErr
	}
	if err != nil {
		return nil, err
	}
	m.orderTies(collectors)
	cols := make([]arrow.Array, len(collectors))
	for i, c := range collectors {
		unsort(c, order)
		if o := m.outputs[i]; m.spec.Normalize == jobs.NormalizeL2 && o.list && o.kind == kindFloat32 && !o.inGraph {
			l2Normalize(c)
		}
		cols[i] = c.array(n)
	}
	rec := array.NewRecordBatch(m.schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

// bucketOutputs is one bucket's outputs on their way to the collectors.
type bucketOutputs struct {
	outs []ort.Value
	lens []int // the bucket's rows' token lengths
}

// runBuckets runs the length-sorted rows on session s in buckets cut by
// bucketEnds, each padded to its own longest row, and hands each bucket's
// outputs to taken in order.
func (m *Model) runBuckets(ctx context.Context, s *session, b *Batch, order, lens []int, taken chan<- bucketOutputs) error {
	ins := make([]ort.Value, len(m.inputs))
	sorted := make([]int, len(order))
	for j, k := range order {
		sorted[j] = lens[k]
	}
	lo := 0
	for _, hi := range bucketEnds(sorted, m.bucketTokens(), m.bucketMaxRows()) {
		bucket := order[lo:hi]
		blens := slices.Clone(sorted[lo:hi])
		lo = hi
		T := blens[len(blens)-1] // sorted: the bucket's longest row
		if m.padTo > 0 {
			T = max(T, m.padTo) // the benchmark's baseline: pad to max_length
		}
		if err := m.makeTextInputs(b, ins, bucket, blens, T); err != nil {
			destroyAll(ins)
			return err
		}
		outs := make([]ort.Value, len(m.outputs))
		if err := m.runOnce(ctx, s, ins, outs, len(bucket), T); err != nil {
			return err
		}
		taken <- bucketOutputs{outs: outs, lens: blens}
	}
	return nil
}

// bucketTokens is the padded tokens of one bucket on the model's device.
func (m *Model) bucketTokens() int {
	if cuda, _ := parseDevice(m.spec.Device); cuda >= 0 {
		return gpuBucketTokens
	}
	return cpuBucketTokens
}

// bucketMaxRows is the most rows of one bucket: model.batch_size, or
// bucketRows where the spec leaves it out.
func (m *Model) bucketMaxRows() int {
	if !m.spec.AutoBatch() {
		return m.spec.BatchSize
	}
	return bucketRows
}

// bucketEnds cuts rows of ascending token lengths into buckets and returns
// each bucket's end: a bucket takes rows while rows × its longest row stays
// within tokens and its rows within maxRows, and holds at least one row.
func bucketEnds(sortedLens []int, tokens, maxRows int) []int {
	var ends []int
	for lo := 0; lo < len(sortedLens); {
		hi := lo + 1
		for hi < len(sortedLens) && hi-lo < maxRows && (hi-lo+1)*max(sortedLens[hi], 1) <= tokens {
			hi++
		}
		ends = append(ends, hi)
		lo = hi
	}
	return ends
}

// takeBuckets moves each bucket's outputs into the collectors, in bucket
// order, and frees them. After the first error it only frees them.
func (m *Model) takeBuckets(collectors []collector, taken <-chan bucketOutputs) error {
	var err error
	for bo := range taken {
		for i, c := range collectors {
			if err != nil {
				break
			}
			if pc, ok := c.(*poolCollector); ok {
				pc.lens = bo.lens
			}
			if e := c.take(bo.outs[i], len(bo.lens), len(bo.lens), false); e != nil {
				err = fmt.Errorf("model %s: output %q: %w", m.spec.Path, m.outputs[i].name, e)
			}
		}
		destroyAll(bo.outs)
	}
	return err
}

// lengthOrder is the kept rows sorted by token length (stable), the order
// in which inferText cuts buckets of bucketRows.
func lengthOrder(lens []int) []int {
	order := make([]int, len(lens))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(lens[x], lens[y]) })
	return order
}

// paddedTokens is the tensor size (rows × padded length) of running lens
// sorted by length in windows of window rows (0: all at once), each window
// cut by bucketEnds, against padding every row to the longest: what
// sorting and bucketing save.
func paddedTokens(lens []int, window, tokens, maxRows int) (bucketed, flat int) {
	if window <= 0 {
		window = max(len(lens), 1)
	}
	longest := 0
	for lo := 0; lo < len(lens); lo += window {
		w := lens[lo:min(lo+window, len(lens))]
		order := lengthOrder(w)
		sorted := make([]int, len(order))
		for j, k := range order {
			sorted[j] = w[k]
		}
		start := 0
		for _, end := range bucketEnds(sorted, tokens, maxRows) {
			bucketed += (end - start) * sorted[end-1]
			start = end
		}
	}
	for _, l := range lens {
		longest = max(longest, l)
	}
	return bucketed, len(lens) * longest
}

// makeTextInputs builds a bucket's tensors: token ids padded to T with the
// tokenizer's pad id, the attention mask and zeros.
func (m *Model) makeTextInputs(b *Batch, ins []ort.Value, bucket, lens []int, T int) error {
	bufs := b.bufs
	rows := len(bucket)
	for i, in := range m.inputs {
		shape := ort.NewShape(int64(rows), int64(T))
		var ids []int64
		switch {
		case in.text != nil:
			ids = make([]int64, rows*T)
			pad := int64(in.text.tok.PadID())
			for j, k := range bucket {
				r := b.Rows[k]
				row := ids[j*T : (j+1)*T]
				for x, id := range bufs.tokIDs[bufs.tokOff[r]:bufs.tokOff[r+1]] {
					row[x] = int64(id)
				}
				for x := lens[j]; x < T; x++ {
					row[x] = pad
				}
			}
		case in.derived == "mask":
			ids = make([]int64, rows*T)
			for j := range bucket {
				for x := range lens[j] {
					ids[j*T+x] = 1
				}
			}
		case in.derived == "zeros":
			ids = make([]int64, rows*T)
		}
		var err error
		if in.kind == kindInt32 {
			d := make([]int32, len(ids))
			for x, v := range ids {
				d[x] = int32(v)
			}
			ins[i], err = ort.NewTensor(shape, d)
		} else {
			ins[i], err = ort.NewTensor(shape, ids)
		}
		if err != nil {
			return fmt.Errorf("model %s: input %q tensor %v: %w", m.spec.Path, in.name, shape, err)
		}
	}
	return nil
}

// unsort reorders a collector's rows, collected in bucket order (row j of
// the collector is kept row order[j]), back to kept-row order.
func unsort(c collector, order []int) {
	switch c := c.(type) {
	case *poolCollector:
		c.data = unsortRows(c.data, order, c.o.width)
	case *typedCollector[float32]:
		c.data = unsortRows(c.data, order, c.width)
	case *typedCollector[float64]:
		c.data = unsortRows(c.data, order, c.width)
	case *typedCollector[int32]:
		c.data = unsortRows(c.data, order, c.width)
	case *typedCollector[int64]:
		c.data = unsortRows(c.data, order, c.width)
	}
}

func unsortRows[T any](d []T, order []int, w int) []T {
	if w <= 0 {
		return d
	}
	out := make([]T, len(d))
	for j, k := range order {
		copy(out[k*w:(k+1)*w], d[j*w:(j+1)*w])
	}
	return out
}

// l2Normalize scales each row of a float32 list collector to unit length
// (rows of norm below 1e-12 are divided by 1e-12, as torch's normalize).
func l2Normalize(c collector) {
	var d []float32
	var w int
	switch c := c.(type) {
	case *poolCollector:
		d, w = c.data, c.o.width
	case *typedCollector[float32]:
		d, w = c.data, c.width
	default:
		return
	}
	for lo := 0; w > 0 && lo+w <= len(d); lo += w {
		row := d[lo : lo+w]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		norm := max(math.Sqrt(ss), 1e-12)
		for x, v := range row {
			row[x] = float32(float64(v) / norm)
		}
	}
}

// poolCollector reduces [rows, T, D] hidden states to [rows, D] over each
// row's first lens[j] tokens (its attention mask).
type poolCollector struct {
	o    *output
	mode jobs.Pooling // mean | cls | max
	lens []int        // tokens per row of the current run
	data []float32
}

func (c *poolCollector) take(v ort.Value, runRows, keep int, _ bool) error {
	t, ok := v.(*ort.Tensor[float32])
	if !ok {
		return fmt.Errorf("got %T, want a float32 tensor", v)
	}
	shape := t.GetShape()
	if len(shape) != 3 || shape[0] != int64(runRows) || (c.o.width > 0 && shape[2] != int64(c.o.width)) {
		return fmt.Errorf("shape %v, want [%d,T,%d]", shape, runRows, c.o.width)
	}
	T, D := int(shape[1]), int(shape[2])
	c.o.width = D
	h := t.GetData()
	for j := range keep {
		n := min(c.lens[j], T)
		base := j * T * D
		out := make([]float32, D)
		switch c.mode {
		case jobs.PoolingCLS:
			copy(out, h[base:base+D])
		case jobs.PoolingMax:
			for x := range D {
				mx := float32(math.Inf(-1))
				for tk := range n {
					mx = max(mx, h[base+tk*D+x])
				}
				out[x] = mx
			}
		default: // mean
			acc := make([]float64, D)
			for tk := range n {
				for x, v := range h[base+tk*D : base+(tk+1)*D] {
					acc[x] += float64(v)
				}
			}
			for x := range D {
				out[x] = float32(acc[x] / float64(max(n, 1)))
			}
		}
		c.data = append(c.data, out...)
	}
	return nil
}

func (c *poolCollector) array(n int) arrow.Array {
	tc := &typedCollector[float32]{o: c.o, width: c.o.width, data: c.data}
	return tc.array(n)
}
