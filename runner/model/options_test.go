package model

import (
	"context"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// WithoutSpinning changes how the runtime's threads wait, never results:
// the same rows score bit for bit the same as with the default options.
func TestWithoutSpinningSameResults(t *testing.T) {
	spec := specFor(t, "heavy")
	spec.Threads = 2
	base := loadModel(t, spec)
	quiet, err := Load(spec, "job.yaml", WithoutSpinning())
	if err != nil {
		t.Fatalf("Load WithoutSpinning: %v", err)
	}
	defer quiet.Close()
	const n = 37
	rec := columnsRecord(features(n, 16, false, 5), n, 16, arrow.PrimitiveTypes.Float32, nil)
	defer rec.Release()
	score := func(m *Model) []float32 {
		b, err := m.Encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		out, err := m.Infer(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Release()
		return append([]float32(nil), out.Column(0).(*array.Float32).Float32Values()...)
	}
	want, got := score(base), score(quiet)
	if len(got) != n || len(want) != n {
		t.Fatalf("rows: %d and %d, want %d", len(want), len(got), n)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("row %d: %v without spinning, %v with", i, got[i], want[i])
		}
	}
}
