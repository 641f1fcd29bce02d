package model

import (
	"fmt"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
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
	if err := CheckDevice("cuda:0"); err != nil {
		if os.Getenv(envRequireCUDA) != "" {
			t.Fatalf("%s is set but cuda:0 is unusable: %v", envRequireCUDA, err)
		}
		t.Skipf("no CUDA execution provider in this runtime (set %s to fail instead): %v", envRequireCUDA, err)
	}
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
