package model

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/internal/testgen"
)

// EnvRequireCUDA makes TestCUDAOutputsMatchReference fail, not skip, when
// the runtime has no CUDA execution provider: set it on a GPU machine, where
// a silent skip would hide a broken GPU path.
const envRequireCUDA = "PRECOG_REQUIRE_CUDA"

// TestCUDAOutputsMatchReference runs the test models on cuda:0 and checks
// their outputs against the Go reference, as TestOutputsMatchReference does
// on the CPU. The ONNX Runtime that `make ort` fetches is a CPU build, so
// on CI this test skips; with a CUDA-enabled library in PRECOG_ORT_LIB on a
// GPU machine it runs.
func TestCUDAOutputsMatchReference(t *testing.T) {
	requireCUDA(t)
	for _, tc := range []struct {
		model string
		n     int
	}{
		{"ranker", 300},
		{"recs", 200},
		{"heavy", 64},
		{"embedder", 130},
		{"ranker_static8", 21},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.model, tc.n), func(t *testing.T) {
			tm := testModel(t, tc.model)
			spec := specFor(t, tc.model)
			spec.Device = "cuda:0"
			m := loadModel(t, spec)
			k := tm.InputWidth()
			x := features(tc.n, k, false, uint64(tc.n))
			b, out := infer(t, m, columnsRecord(x, tc.n, k, arrow.PrimitiveTypes.Float32, nil))
			if len(b.Rejects) != 0 {
				t.Fatalf("rejects: %v", b.Rejects)
			}
			checkAgainstReference(t, tm, x, k, identity(tc.n), out)
		})
	}
}

// requireCUDA skips (or, with PRECOG_REQUIRE_CUDA set, fails) a test where
// cuda:0 is unusable.
func requireCUDA(t *testing.T) {
	t.Helper()
	if err := CheckDevice("cuda:0"); err != nil {
		if os.Getenv(envRequireCUDA) != "" {
			t.Fatalf("%s is set but cuda:0 is unusable: %v", envRequireCUDA, err)
		}
		t.Skipf("no CUDA execution provider in this runtime (set %s to fail instead): %v", envRequireCUDA, err)
	}
}

// cudaTextTolerance bounds |Δ| between cuda:0 and the reference for the
// text models: ONNX Runtime's CUDA MatMul computes in TF32 by default
// (10-bit mantissa), so a 384-term dot product differs by up to ~1e-3.
const cudaTextTolerance = 5e-3

// TestCUDATextMatchesReference runs the text models (WordPiece and BPE,
// the tests' 16→8 width and the bench's 384→384) on cuda:0, pooled and
// normalized, against the pure-Go reference on the same token ids.
func TestCUDATextMatchesReference(t *testing.T) {
	requireCUDA(t)
	for _, tc := range []struct {
		name string
		tm   *testgen.TextEmbedder
	}{
		{"wordpiece", testgen.NewTextEmbedder(testgen.DefaultSeed)},
		{"bpe", testgen.NewTextEmbedderBPE(testgen.DefaultSeed)},
		{"wordpiece-384", testgen.NewTextEmbedderSized(testgen.DefaultSeed, 384, 384)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, tm, tok := textSpecFor(t, tc.tm, "mean", "l2", 64)
			spec.Device = "cuda:0"
			m := loadModel(t, spec)
			titles := textCorpus(700)
			rec := titlesRecord(titles, nil)
			defer rec.Release()
			b, out := infer(t, m, rec)
			if len(b.Rejects) != 0 {
				t.Fatalf("rejects %+v", b.Rejects)
			}
			col := out.Column(0).(*array.List)
			vals := col.ListValues().(*array.Float32)
			var worst float64
			for k, r := range b.Rows {
				want := tm.Pool(tok.Encode(nil, titles[r], 64), "mean", true)
				lo, _ := col.ValueOffsets(k)
				for j, w := range want {
					worst = max(worst, math.Abs(float64(vals.Value(int(lo)+j))-w))
				}
			}
			if worst > cudaTextTolerance {
				t.Fatalf("max |Δ| %.3g against the reference, want ≤ %g", worst, cudaTextTolerance)
			}
			t.Logf("cuda:0 max |Δ| %.2g over %d rows", worst, len(b.Rows))
		})
	}
}
