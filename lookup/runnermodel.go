package lookup

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
)

// runnerModel serves live inference with runner/model, the code the batch
// job runs: same Encode (column conversion, rejects), same sessions.
type runnerModel struct{ m *model.Model }

// loadRunnerModel is the default Config.LoadModel. Live inference shares
// the machine with the HTTP server, so its sessions do not spin, and
// without an explicit model.threads each session runs one intra-op thread:
// the dynamic batcher already makes runs large, and measured on 2 cores a
// 64-row batch of the heavy test model ran 2.6× faster per row on one
// thread than on the runtime's default pool fighting the server for the
// cores. model.sessions sets how many batches run at once.
func loadRunnerModel(spec *jobs.Spec) (LiveModel, error) {
	ms := spec.Model
	if ms.Threads == 0 {
		ms.Threads = 1
	}
	if ms.Sessions == 0 {
		ms.Sessions = 1 // the batcher runs max(model.sessions, 1) batches at once
	}
	m, err := model.Load(ms, spec.File, model.WithoutSpinning())
	if err != nil {
		return nil, err
	}
	return runnerModel{m}, nil
}

func (r runnerModel) Version() string  { return r.m.Version() }
func (r runnerModel) Info() model.Info { return r.m.Info() }
func (r runnerModel) Close() error     { return r.m.Close() }

// Predict encodes and infers rec, then spreads the kept rows back to their
// source positions (rejected rows stay null and carry their reason).
func (r runnerModel) Predict(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, []string, error) {
	b, err := r.m.Encode(rec)
	if err != nil {
		return nil, nil, err
	}
	defer b.Release()
	out, err := r.m.Infer(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	n := int(rec.NumRows())
	if len(b.Rejects) == 0 {
		return out, nil, nil
	}
	defer out.Release()
	rejected := make([]string, n)
	for _, rj := range b.Rejects {
		rejected[rj.Row] = rj.Reason
	}
	// Rebuild with one row per source row: kept rows from out, nulls for
	// rejected ones, so rows line up with the request batch.
	cols := make([]arrow.Array, out.NumCols())
	for c := range cols {
		bld := array.NewBuilder(memory.DefaultAllocator, out.Column(c).DataType())
		src := out.Column(c)
		k := 0
		for i := 0; i < n; i++ {
			if rejected[i] != "" {
				bld.AppendNull()
				continue
			}
			if err := appendFrom(bld, src, k); err != nil {
				bld.Release()
				for _, a := range cols[:c] {
					a.Release()
				}
				return nil, nil, err
			}
			k++
		}
		cols[c] = bld.NewArray()
		bld.Release()
	}
	spread := array.NewRecordBatch(out.Schema(), cols, int64(n))
	for _, a := range cols {
		a.Release()
	}
	return spread, rejected, nil
}

// appendFrom copies row i of src into bld (same type).
func appendFrom(bld array.Builder, src arrow.Array, i int) error {
	slice := array.NewSlice(src, int64(i), int64(i+1))
	defer slice.Release()
	if err := bld.AppendValueFromString(slice.ValueStr(0)); err != nil {
		return fmt.Errorf("copy output row %d: %w", i, err)
	}
	return nil
}
