package model

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

func TestFloat16Bits(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.1, 0x2e66}, {65504, 0x7bff},
		{1e6, 0x7bff}, {-1e6, 0xfbff}, // saturated, not Inf
		{5.9604645e-8, 0x0001}, {6.1035156e-5, 0x0400}, // smallest subnormal, smallest normal
		{2049, 0x6800}, {2051, 0x6802}, // ties to even: 2048, 2052
		{1e-9, 0}, {float32(math.Inf(1)), 0x7c00},
	} {
		if got := float16Bits(tc.f); got != tc.want {
			t.Errorf("float16Bits(%g) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
	if got := float16Bits(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", got)
	}
}

// fp16Case loads spec at fp32 and fp16, runs the same record through both
// and returns the two outputs' values per column and row.
func fp16Case(t *testing.T, spec jobs.ModelSpec, rec arrow.RecordBatch) (fp32, fp16 [][][]float64) {
	t.Helper()
	for _, p := range []jobs.Precision{jobs.PrecisionFP32, jobs.PrecisionFP16} {
		spec.Precision = p
		m := loadModel(t, spec)
		b, out := infer(t, m, rec)
		if len(b.Rejects) != 0 {
			t.Fatalf("%s: rejects %v", p, b.Rejects)
		}
		var cols [][][]float64
		for i := range int(out.NumCols()) {
			cols = append(cols, values(t, out.Column(i)))
		}
		if p == jobs.PrecisionFP32 {
			fp32 = cols
		} else {
			fp16 = cols
		}
	}
	return fp32, fp16
}

// fp16Diff is the largest |Δ| and the lowest per-row cosine between two
// outputs, and whether any value differs at all.
func fp16Diff(a, b [][]float64) (maxAbs, minCos float64, differ bool) {
	minCos = 1
	for r := range a {
		var dot, na, nb float64
		for j := range a[r] {
			d := math.Abs(a[r][j] - b[r][j])
			maxAbs = max(maxAbs, d)
			differ = differ || d != 0
			dot += a[r][j] * b[r][j]
			na += a[r][j] * a[r][j]
			nb += b[r][j] * b[r][j]
		}
		if na > 0 && nb > 0 {
			minCos = min(minCos, dot/math.Sqrt(na*nb))
		}
	}
	return maxAbs, minCos, differ
}

// TestFP16MatchesFP32: precision: fp16 computes the test models and the
// text models in float16 (their outputs differ from fp32's, so the rewrite
// ran: on the old code, which ignored the field, they were identical) and
// stays within float16's precision of fp32: embeddings at cosine ≥ 0.999
// on every row, scores within the bounds below. ONNX Runtime's CPU
// provider runs the float16 graphs.
func TestFP16MatchesFP32(t *testing.T) {
	for _, tc := range []struct {
		model  string
		n      int
		maxAbs float64 // bound on |Δ| of scores (scalar outputs)
	}{
		{"ranker", 300, 2e-3},  // a sigmoid in (0,1)
		{"heavy", 64, 0.05},    // an unbounded score of 3 1024-wide layers, |score| ~ 1-10
		{"embedder", 130, 0},   // cosine only
		{"typed_int64", 50, 0}, // integer input: Cast to float16 inside
	} {
		t.Run(tc.model, func(t *testing.T) {
			tm := testModel(t, tc.model)
			k := tm.InputWidth()
			ints := strings.HasPrefix(tc.model, "typed_int")
			dt := arrow.DataType(arrow.PrimitiveTypes.Float32)
			if ints {
				dt = arrow.PrimitiveTypes.Int64
			}
			x := features(tc.n, k, ints, uint64(tc.n))
			a, b := fp16Case(t, specFor(t, tc.model), columnsRecord(x, tc.n, k, dt, nil))
			for i := range a {
				maxAbs, minCos, differ := fp16Diff(a[i], b[i])
				t.Logf("%s output %d: fp16 vs fp32 max |Δ| %.3g, min cosine %.6f", tc.model, i, maxAbs, minCos)
				if !differ {
					t.Fatalf("fp16 output equals fp32's bit for bit: the graph was not converted")
				}
				if len(a[i][0]) > 1 && minCos < 0.999 {
					t.Errorf("min cosine %.6f, want ≥ 0.999", minCos)
				}
				if tc.maxAbs > 0 && maxAbs > tc.maxAbs {
					t.Errorf("max |Δ| %.3g, want ≤ %g", maxAbs, tc.maxAbs)
				}
			}
		})
	}
	for _, tc := range []struct {
		name string
		tm   *testgen.TextEmbedder
	}{
		{"text-wordpiece", testgen.NewTextEmbedder(testgen.DefaultSeed)},
		{"text-bpe", testgen.NewTextEmbedderBPE(testgen.DefaultSeed)},
		{"text-wordpiece-384", testgen.NewTextEmbedderSized(testgen.DefaultSeed, 384, 384)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _, _ := textSpecFor(t, tc.tm, "mean", "l2", 64)
			rec := titlesRecord(textCorpus(300), nil)
			defer rec.Release()
			a, b := fp16Case(t, spec, rec)
			maxAbs, minCos, differ := fp16Diff(a[0], b[0])
			t.Logf("%s: fp16 vs fp32 max |Δ| %.3g, min cosine %.6f", tc.name, maxAbs, minCos)
			if !differ {
				t.Fatalf("fp16 output equals fp32's bit for bit: the graph was not converted")
			}
			if minCos < 0.999 {
				t.Errorf("min cosine %.6f, want ≥ 0.999", minCos)
			}
		})
	}
}

// TestFP16Edges: a model with an ai.onnx.ml tail (ZipMap, blocked: it
// stays float32) converts and matches fp32 closely; a model whose graph
// has an operator the converter has no type rule for is refused at load
// with model.precision and the operator named; an unknown precision
// value is the spec's to refuse (jobs), and Load ignores none silently.
func TestFP16Edges(t *testing.T) {
	t.Run("zipmap", func(t *testing.T) {
		tm := testModel(t, "classifier_zipmap")
		k := tm.InputWidth()
		spec := specFor(t, "classifier_zipmap")
		x := features(40, k, false, 40)
		a, b := fp16Case(t, spec, columnsRecord(x, 40, k, arrow.PrimitiveTypes.Float32, nil))
		for i := range a {
			maxAbs, _, _ := fp16Diff(a[i], b[i])
			if maxAbs > 5e-3 {
				t.Errorf("output %d: max |Δ| %.3g, want ≤ 5e-3", i, maxAbs)
			}
		}
	})
	t.Run("unknown operator", func(t *testing.T) {
		g := testgen.NewGraph("det")
		g.Input("features", testgen.Float, -1, 4)
		g.Initializer("w", []int64{4, 4}, make([]float32, 16))
		g.Node("MatMul", []string{"features", "w"}, []string{"h"})
		g.Node("Det", []string{"h"}, []string{"score"})
		g.Output("score", testgen.Float, -1)
		b, err := testgen.NewModelProto(g).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "det.onnx")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		spec := jobs.ModelSpec{Path: path, Precision: jobs.PrecisionFP16,
			Inputs: map[string]jobs.InputSpec{"features": {Columns: columnNames(4)}}, Outputs: map[string]string{"score": "score"}}
		m, err := Load(spec, "job.yaml")
		if err == nil {
			m.Close()
			t.Fatal("Load converted a graph with an operator it has no rule for")
		}
		for _, want := range []string{"job.yaml: model.precision:", "operator Det", "precision: fp32"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	})
}
