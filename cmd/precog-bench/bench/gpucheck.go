package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/model"
	"github.com/precog-ml/precog/runner/model/tokenizer"
)

// The -check mode is the GPU check's part that ran as Go test binaries
// before (scripts/test-gpu.sh on a machine without Go): one precog binary
// built with -tags gpucheck carries it as `precog gpu-check -check ...`, so
// the bundle ships one Go binary instead of four.
type checkConfig struct {
	what, device string
}

func checkFlags(fs *flag.FlagSet) *checkConfig {
	c := &checkConfig{}
	fs.StringVar(&c.what, "check", "", "check mode: `models` (every test model and text model on -check-device against its pure-Go reference), `worker` (a worker with --devices -check-device on the embedded ledger runs a job and records its cost) or `testdata` (write the test models, the users dataset and example jobs into -work); exit status 1 on a failure")
	fs.StringVar(&c.device, "check-device", "cuda:0", "the device -check models and worker run on")
	return c
}

// main runs the -check mode and returns the exit status.
func (c *checkConfig) main(cfg config) int {
	ctx := context.Background()
	var err error
	switch c.what {
	case "models":
		err = checkModels(ctx, c.device, os.Stdout)
	case "worker":
		err = checkWorker(ctx, c.device, os.Stdout)
	case "testdata":
		if cfg.work == "" {
			fmt.Fprintln(os.Stderr, "-check testdata: set -work DIR")
			return 2
		}
		_, err = testgen.Generate(cfg.work, testgen.GenerateOptions{})
	default:
		fmt.Fprintf(os.Stderr, "-check %q: want models, worker or testdata\n", c.what)
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "check %s on %s: FAILED: %v\n", c.what, c.device, err)
		return 1
	}
	return 0
}

// checkTolerance bounds |Δ| between a float output on the device and the
// pure-Go reference: ONNX Runtime's CUDA MatMul computes in TF32 by
// default (10-bit mantissa), so a 384-term dot product differs by up to
// ~1e-3.
const checkTolerance = 5e-3

// checkModels runs the test models (every element type and shape the GPU
// path takes) and the text models (WordPiece and BPE, 16→8 and the
// bench's 384→384, pooled and normalized) on dev against the references.
func checkModels(ctx context.Context, dev string, out *os.File) error {
	if err := model.CheckDevice(dev); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "precog-check-models-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, tc := range []struct {
		name string
		n    int
	}{{"ranker", 300}, {"recs", 200}, {"heavy", 64}, {"embedder", 130}, {"ranker_static8", 21}} {
		worst, err := checkTestModel(ctx, dir, tc.name, tc.n, dev)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", tc.name, dev, err)
		}
		fmt.Fprintf(out, "%s on %s: %d rows, max |Δ| %.2g against the reference\n", tc.name, dev, tc.n, worst)
	}
	for _, tc := range []struct {
		name string
		tm   *testgen.TextEmbedder
	}{
		{"text-wordpiece", testgen.NewTextEmbedder(testgen.DefaultSeed)},
		{"text-bpe", testgen.NewTextEmbedderBPE(testgen.DefaultSeed)},
		{"text-wordpiece-384", testgen.NewTextEmbedderSized(testgen.DefaultSeed, 384, 384)},
	} {
		worst, n, err := checkTextModel(ctx, filepath.Join(dir, tc.name), tc.tm, dev)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", tc.name, dev, err)
		}
		fmt.Fprintf(out, "%s on %s: %d rows, max |Δ| %.2g against the reference\n", tc.name, dev, n, worst)
	}
	return nil
}

// checkTestModel runs n rows of random features through testgen model name
// on dev and returns the largest |Δ| against its reference; integer
// outputs (top-k ids) must be equal.
func checkTestModel(ctx context.Context, dir, name string, n int, dev string) (float64, error) {
	tm, err := testgen.Get(name)
	if err != nil {
		return 0, err
	}
	path, err := testgen.Write(dir, name)
	if err != nil {
		return 0, err
	}
	k := tm.InputWidth()
	cols := make([]string, k)
	fields := make([]arrow.Field, k)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
		fields[i] = arrow.Field{Name: cols[i], Type: arrow.PrimitiveTypes.Float32}
	}
	outs := map[string]string{}
	for _, o := range tm.Outputs {
		if !o.Seq {
			outs[o.Name] = o.Name
		}
	}
	m, err := model.Load(jobs.ModelSpec{Path: path, Device: dev, Inputs: map[string]jobs.InputSpec{tm.Input.Name: {Columns: cols}}, Outputs: outs}, "")
	if err != nil {
		return 0, err
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(uint64(n), 99))
	x := make([]float32, n*k)
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i := range x {
		x[i] = float32(3*r.Float64() - 1.5)
		b.Field(i % k).(*array.Float32Builder).Append(x[i])
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	got, err := runModel(ctx, m, rec)
	if err != nil {
		return 0, err
	}
	defer got.Release()
	ref, err := tm.Reference(x, n)
	if err != nil {
		return 0, err
	}
	var worst float64
	for i, f := range got.Schema().Fields() {
		want, ok := ref[f.Name]
		if !ok {
			return 0, fmt.Errorf("no reference for output %q", f.Name)
		}
		vals := columnValues(got.Column(i))
		if want.Int64 != nil {
			for j, v := range vals {
				if int64(v) != want.Int64[j] {
					return 0, fmt.Errorf("%s value %d (row %d): %v, want %d", f.Name, j, j*n/len(vals), v, want.Int64[j])
				}
			}
			continue
		}
		if len(vals) != len(want.Float32) {
			return 0, fmt.Errorf("%s: %d values, want %d", f.Name, len(vals), len(want.Float32))
		}
		for j, v := range vals {
			worst = max(worst, math.Abs(v-float64(want.Float32[j])))
		}
	}
	if worst > checkTolerance {
		return worst, fmt.Errorf("max |Δ| %.3g against the reference, want ≤ %g", worst, checkTolerance)
	}
	return worst, nil
}

// checkTextModel embeds a length-skewed corpus with tm on dev (mean
// pooling, l2) and returns the largest |Δ| against the pure-Go reference on
// the same token ids, and the rows run.
func checkTextModel(ctx context.Context, dir string, tm *testgen.TextEmbedder, dev string) (float64, int, error) {
	const maxLen = 64
	path, err := tm.Write(dir)
	if err != nil {
		return 0, 0, err
	}
	tokPath := filepath.Join(dir, "tokenizer.json")
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		return 0, 0, err
	}
	m, err := model.Load(jobs.ModelSpec{
		Path:   path,
		Device: dev,
		Inputs: map[string]jobs.InputSpec{
			"input_ids":      {Text: jobs.TextColumns{"title"}, Tokenizer: tokPath, MaxLength: maxLen},
			"attention_mask": {MaskOf: "input_ids"},
		},
		Outputs:   map[string]string{"last_hidden_state": "embedding"},
		Pooling:   jobs.PoolingMean,
		Normalize: jobs.NormalizeL2,
	}, "")
	if err != nil {
		return 0, 0, err
	}
	defer m.Close()
	short := []string{"blue shoe", "Café naïve", "東京の本", "red cat 😀", "usb-c cable", "the quick brown fox", "wireless headset"}
	titles := make([]string, 700)
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "title", Type: arrow.BinaryTypes.String}}, nil))
	defer b.Release()
	for i := range titles {
		titles[i] = short[i%len(short)]
		if i%9 == 4 {
			titles[i] = strings.Repeat("the lazy dog jumps over the green jacket, ", 1+i%7)
		}
		b.Field(0).(*array.StringBuilder).Append(titles[i])
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	got, err := runModel(ctx, m, rec)
	if err != nil {
		return 0, 0, err
	}
	defer got.Release()
	col := got.Column(0).(*array.List)
	vals := col.ListValues().(*array.Float32)
	var worst float64
	for r, title := range titles {
		lo, _ := col.ValueOffsets(r)
		for j, w := range tm.Pool(tok.Encode(nil, title, maxLen), jobs.PoolingMean, true) {
			worst = max(worst, math.Abs(float64(vals.Value(int(lo)+j))-w))
		}
	}
	if worst > checkTolerance {
		return worst, len(titles), fmt.Errorf("max |Δ| %.3g against the reference, want ≤ %g", worst, checkTolerance)
	}
	return worst, len(titles), nil
}

// runModel encodes and infers one record; every row must be kept.
func runModel(ctx context.Context, m *model.Model, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	b, err := m.Encode(rec)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	defer b.Release()
	if len(b.Rejects) != 0 {
		return nil, fmt.Errorf("%d rows rejected: %v", len(b.Rejects), b.Rejects[0])
	}
	out, err := m.Infer(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("infer: %w", err)
	}
	if out.NumRows() != rec.NumRows() {
		out.Release()
		return nil, fmt.Errorf("%d rows out of %d in", out.NumRows(), rec.NumRows())
	}
	return out, nil
}

// columnValues flattens a numeric column, scalar or list, to float64.
func columnValues(col arrow.Array) []float64 {
	if l, ok := col.(*array.List); ok {
		col = l.ListValues()
	}
	out := make([]float64, col.Len())
	for i := range out {
		switch a := col.(type) {
		case *array.Float32:
			out[i] = float64(a.Value(i))
		case *array.Float64:
			out[i] = a.Value(i)
		case *array.Int32:
			out[i] = float64(a.Value(i))
		case *array.Int64:
			out[i] = float64(a.Value(i))
		}
	}
	return out
}

// checkWorker runs a worker with --devices dev on the embedded ledger (no
// Postgres on a GPU test machine) through a 3000-row ranker job: the run
// succeeds, and on a GPU every committed shard records the device's
// seconds and rows.
func checkWorker(ctx context.Context, dev string, out *os.File) error {
	if err := model.CheckDevice(dev); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "precog-check-worker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	const rows = 3000
	spec, err := workerJob(dir, rows)
	if err != nil {
		return err
	}
	led, err := bolt.Open(filepath.Join(dir, bolt.FileName))
	if err != nil {
		return err
	}
	defer led.Close()
	job, err := runner.OpenJob(ctx, spec)
	if err != nil {
		return err
	}
	run, shards, err := runner.PlanRun(ctx, job)
	job.Close()
	if err != nil {
		return err
	}
	if err := led.CreateRun(ctx, run, shards); err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	var werr error
	done := make(chan struct{}) // closed when the worker has stopped, werr set
	go func() {
		defer close(done)
		werr = runner.NewWorker(led, runner.WorkerOptions{ID: "gpu-check", StateDir: filepath.Join(dir, "state"), Lease: 30 * time.Second, Devices: []string{dev}, Logger: slog.New(slog.DiscardHandler)}).Run(wctx)
	}()
	defer func() { stop(); <-done }()
	if err := waitSucceeded(ctx, led, run.ID, done, func() error { return werr }); err != nil {
		return err
	}
	got, err := led.Shards(ctx, run.ID)
	if err != nil {
		return err
	}
	c := jobs.SumCost(got)
	if strings.HasPrefix(dev, "cuda:") && (c.DeviceSeconds <= 0 || c.GPURows != rows) {
		return fmt.Errorf("run cost %+v, want GPU device-seconds and %d GPU rows", c, rows)
	}
	if c.CPUSeconds <= 0 {
		return fmt.Errorf("run cost %+v, want CPU seconds", c)
	}
	busy, ok := c.GPUBusy()
	fmt.Fprintf(out, "worker on %s: run %s succeeded, cost %+v (GPU busy %.0f%%, NVML %v)\n", dev, run.ID, c, 100*busy, ok)
	return nil
}

// workerJob writes a ranker job over rows rows into dir and loads it.
func workerJob(dir string, rows int64) (*jobs.Spec, error) {
	if _, err := testgen.Write(filepath.Join(dir, "models"), "ranker"); err != nil {
		return nil, err
	}
	ds := testgen.Dataset{Seed: 11, FilesPerDate: 2, RowsPerFile: rows / 2, RowsPerGroup: 500}
	if _, err := testgen.WriteDataset(filepath.Join(dir, "data"), ds); err != nil {
		return nil, err
	}
	cols := make([]string, 16)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
	}
	path := filepath.Join(dir, "job.yaml")
	body := fmt.Sprintf("name: gpu-check-worker\nsource:\n  parquet: { path: data }\n  key: user_id\n  rows_per_shard: 500\nmodel:\n  path: models/ranker.onnx\n  inputs: { features: { columns: [%s] } }\n  outputs: { score: score }\n  batch_size: 128\nsinks:\n  parquet: { path: out }\n", strings.Join(cols, ", "))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		return nil, err
	}
	return jobs.Load(path, nil)
}

// waitSucceeded waits, at most 2 minutes, for run id to end, and wants it
// succeeded; a worker that stops first (done closed, werr its error) fails
// it.
func waitSucceeded(ctx context.Context, led *bolt.Ledger, id string, done <-chan struct{}, werr func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := led.Run(ctx, id)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			if r.State != jobs.RunSucceeded {
				return fmt.Errorf("run %s: %s (%s), want succeeded", r.ID, r.State, r.Error)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s still %s after 2m", r.ID, r.State)
		}
		select {
		case <-done:
			return fmt.Errorf("worker stopped: %v", werr())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
