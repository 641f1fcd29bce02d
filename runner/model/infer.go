package model

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	ort "github.com/yalue/onnxruntime_go"
)

// Infer runs the model on an encoded batch and returns a record of
// OutputFields() with one row per kept row (b.Rows), in order. It waits for
// a free session (or ctx); cancelling ctx also stops a run in progress. A
// batch without kept rows returns an empty record without running.
func (m *Model) Infer(ctx context.Context, b *Batch) (arrow.RecordBatch, error) {
	n := len(b.Rows)
	if n == 0 {
		return m.emptyRecord(), nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if m.hasText {
		return m.inferText(ctx, b)
	}
	s, err := m.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("model %s: wait for a session: %w", m.spec.Path, err)
	}
	defer m.release(s)

	// A batch of more rows than BatchRows (the pipeline reads and encodes
	// many model batches as one unit) runs in BatchRows pieces.
	chunk := n
	if m.fixedBatch > 0 {
		chunk = m.fixedBatch
	} else if bs := m.batch; bs > 0 && n > bs {
		chunk = bs
	}
	collectors := make([]collector, len(m.outputs))
	for i, o := range m.outputs {
		collectors[i] = newCollector(o)
	}
	ins := make([]ort.Value, len(m.inputs))
	outs := make([]ort.Value, len(m.outputs))
	for lo := 0; lo < n; lo += chunk {
		keep := min(chunk, n-lo)
		runRows := keep
		if m.fixedBatch > 0 {
			runRows = chunk // padded rows in this run
		}
		if err := m.makeInputs(b, ins, lo, runRows); err != nil {
			destroyAll(ins)
			return nil, err
		}
		if err := m.runOnce(ctx, s, ins, outs, runRows, 0); err != nil {
			return nil, err
		}
		for i, c := range collectors {
			if err := c.take(outs[i], runRows, keep, chunk == n); err != nil {
				destroyAll(outs)
				return nil, fmt.Errorf("model %s: output %q: %w", m.spec.Path, m.outputs[i].name, err)
			}
		}
		destroyAll(outs)
	}
	m.orderTies(collectors)
	cols := make([]arrow.Array, len(collectors))
	for i, c := range collectors {
		cols[i] = c.array(n)
	}
	rec := array.NewRecordBatch(m.schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

// makeInputs wraps rows [lo, lo+rows) of the batch's buffers as tensors
// (no copy: the tensors point at the Go buffers).
func (m *Model) makeInputs(b *Batch, ins []ort.Value, lo, rows int) error {
	for i, in := range m.inputs {
		w := b.widths[i]
		shape := ort.NewShape(int64(rows), int64(w))
		if in.rank == 1 {
			shape = ort.NewShape(int64(rows))
		}
		var err error
		switch d := b.bufs.data[i].(type) {
		case []float32:
			ins[i], err = ort.NewTensor(shape, d[lo*w:(lo+rows)*w])
		case []float64:
			ins[i], err = ort.NewTensor(shape, d[lo*w:(lo+rows)*w])
		case []int32:
			ins[i], err = ort.NewTensor(shape, d[lo*w:(lo+rows)*w])
		case []int64:
			ins[i], err = ort.NewTensor(shape, d[lo*w:(lo+rows)*w])
		case []string:
			ins[i], err = newStringTensor(shape, d[lo*w:(lo+rows)*w])
		}
		if err != nil {
			return fmt.Errorf("model %s: input %q tensor %v: %w", m.spec.Path, in.name, shape, err)
		}
	}
	return nil
}

func destroyAll(vs []ort.Value) {
	for i, v := range vs {
		if v != nil {
			v.Destroy()
			vs[i] = nil
		}
	}
}

func (m *Model) emptyRecord() arrow.RecordBatch {
	cols := make([]arrow.Array, len(m.fields))
	for i, f := range m.fields {
		bld := array.NewBuilder(memory.DefaultAllocator, f.Type)
		cols[i] = bld.NewArray()
		bld.Release()
	}
	rec := array.NewRecordBatch(m.schema, cols, 0)
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// collector gathers one output over the runs of a batch and builds its
// Arrow column.
type collector interface {
	// take appends the first keep rows of an output tensor of runRows rows.
	// whole says this run covers the batch, so the tensor's Go buffer can
	// become the column without a copy.
	take(v ort.Value, runRows, keep int, whole bool) error
	array(n int) arrow.Array
}

func newCollector(o *output) collector {
	if o.zipKey != "" {
		return newMapCollector(o)
	}
	if o.kind == kindString {
		return &stringCollector{o: o, width: o.width}
	}
	switch o.kind {
	case kindFloat32:
		return &typedCollector[float32]{o: o, width: o.width}
	case kindFloat64:
		return &typedCollector[float64]{o: o, width: o.width}
	case kindInt32:
		return &typedCollector[int32]{o: o, width: o.width}
	default:
		return &typedCollector[int64]{o: o, width: o.width}
	}
}

// rowWidth is the values per row of an output tensor of shape: 1 for [N]
// (a field) or [N,1], k for [N,k] (a list); ok is false for any other
// shape.
func (o *output) rowWidth(shape []int64) (w int, ok bool) {
	switch {
	case len(shape) == 1 && !o.list:
		return 1, true
	case len(shape) == 2 && (o.list || shape[1] == 1):
		return int(shape[1]), true
	}
	return 0, false
}

type typedCollector[T elem] struct {
	o     *output
	width int // values per row; -1 until the first run of a dynamic list
	data  []T
}

func (c *typedCollector[T]) take(v ort.Value, runRows, keep int, whole bool) error {
	t, ok := v.(*ort.Tensor[T])
	if !ok {
		return fmt.Errorf("got %T, want a %s tensor", v, c.o.kind)
	}
	shape := t.GetShape()
	w, ok := c.o.rowWidth(shape)
	if !ok {
		return fmt.Errorf("shape %v, want %s", shape, c.want())
	}
	if shape[0] != int64(runRows) {
		return fmt.Errorf("shape %v for %d input rows", shape, runRows)
	}
	if c.width >= 0 && w != c.width {
		return fmt.Errorf("shape %v, want %s", shape, c.want())
	}
	c.width = w
	if c.o.list && len(c.data)+keep*w > maxListValues {
		return fmt.Errorf("%d values exceed what one list column holds (%d); lower model.batch_size", len(c.data)+keep*w, maxListValues)
	}
	d := t.GetData()
	if whole && keep == runRows {
		c.data = d // the tensor's Go copy; Destroy does not free it
		return nil
	}
	c.data = append(c.data, d[:keep*w]...)
	return nil
}

func (c *typedCollector[T]) want() string {
	if !c.o.list {
		return "[N] or [N,1]"
	}
	if c.o.width >= 0 {
		return fmt.Sprintf("[N,%d]", c.o.width)
	}
	return "[N,k]"
}

// array wraps the collected values as an Arrow column without copying.
func (c *typedCollector[T]) array(n int) arrow.Array {
	elemType := c.o.kind.arrowType()
	values := array.NewData(elemType, len(c.data),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.GetBytes(c.data))}, nil, 0, 0)
	if !c.o.list {
		arr := array.MakeFromData(values)
		values.Release()
		return arr
	}
	w := max(c.width, 0)
	offsets := make([]int32, n+1)
	for i := range offsets {
		offsets[i] = int32(i * w)
	}
	list := array.NewData(arrow.ListOf(elemType), n,
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.GetBytes(offsets))},
		[]arrow.ArrayData{values}, 0, 0)
	values.Release()
	arr := array.MakeFromData(list)
	list.Release()
	return arr
}

// maxListValues bounds the values of one list column so its int32 offsets
// cannot overflow.
const maxListValues = math.MaxInt32

// runOnce runs the session on ins, which it destroys, into outs (cleared
// first; destroyed on error). The error names the model and the run's
// shape: rows, and tokens per row for text models (0: none).
func (m *Model) runOnce(ctx context.Context, s *session, ins, outs []ort.Value, rows, tokens int) error {
	clear(outs)
	err := s.run(ctx, ins, outs)
	destroyAll(ins)
	if err == nil {
		return nil
	}
	destroyAll(outs)
	if ctx.Err() != nil {
		return fmt.Errorf("model %s: %w", m.spec.Path, ctx.Err())
	}
	if tokens > 0 {
		return fmt.Errorf("model %s: run %d rows × %d tokens: %w", m.spec.Path, rows, tokens, err)
	}
	return fmt.Errorf("model %s: run %d rows: %w", m.spec.Path, rows, err)
}
