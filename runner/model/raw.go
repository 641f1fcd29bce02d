package model

import (
	"context"
	"fmt"
	"math/rand/v2"

	ort "github.com/yalue/onnxruntime_go"
)

// RawRunner is the benchmark baseline "raw ONNX Runtime on the same
// batches": it takes one session of the model's pool (same model, device,
// threads and outputs as Infer), prebuilds input tensors of batchRows rows of
// random data, and returns run, which calls the session once on them and
// frees the outputs, and done, which gives the session back. Comparing
// rows/s of run against the pipeline isolates precog's own overhead.
func (m *Model) RawRunner(batchRows int) (run func() error, done func(), err error) {
	if batchRows <= 0 {
		return nil, nil, fmt.Errorf("raw runner: %d rows per batch, want > 0", batchRows)
	}
	if m.fixedBatch > 0 {
		batchRows = m.fixedBatch
	}
	r := rand.New(rand.NewPCG(1, 2))
	ins := make([]ort.Value, len(m.inputs))
	for i, in := range m.inputs {
		w := in.width
		if in.list == "" {
			w = len(in.columns)
		}
		if w < 0 {
			destroyAll(ins)
			return nil, nil, fmt.Errorf("raw runner: input %q has a dynamic width; it needs a static one", in.name)
		}
		shape := ort.NewShape(int64(batchRows), int64(w))
		if in.rank == 1 {
			shape = ort.NewShape(int64(batchRows))
		}
		size := batchRows * w
		switch in.kind {
		case kindFloat32:
			d := make([]float32, size)
			for j := range d {
				d[j] = r.Float32()
			}
			ins[i], err = ort.NewTensor(shape, d)
		case kindFloat64:
			d := make([]float64, size)
			for j := range d {
				d[j] = r.Float64()
			}
			ins[i], err = ort.NewTensor(shape, d)
		case kindInt32:
			d := make([]int32, size)
			for j := range d {
				d[j] = int32(r.IntN(10))
			}
			ins[i], err = ort.NewTensor(shape, d)
		case kindInt64:
			d := make([]int64, size)
			for j := range d {
				d[j] = int64(r.IntN(10))
			}
			ins[i], err = ort.NewTensor(shape, d)
		case kindString:
			d := make([]string, size)
			for j := range d {
				d[j] = string(rune('a' + r.IntN(10)))
			}
			ins[i], err = newStringTensor(shape, d)
		}
		if err != nil {
			destroyAll(ins)
			return nil, nil, fmt.Errorf("raw runner: input %q: %w", in.name, err)
		}
	}
	s, err := m.acquire(context.Background())
	if err != nil {
		destroyAll(ins)
		return nil, nil, fmt.Errorf("raw runner: %w", err)
	}
	outs := make([]ort.Value, len(m.outputs))
	run = func() error {
		clear(outs)
		err := s.s.RunWithOptions(ins, outs, s.ro)
		destroyAll(outs)
		if err != nil {
			return fmt.Errorf("raw runner: %w", err)
		}
		return nil
	}
	done = func() {
		destroyAll(ins)
		m.release(s)
	}
	return run, done, nil
}
