package model

import (
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/precog-ml/precog/jobs"
)

// TestPadBucketsToKeepsOutputs: the bench's padding-to-max_length baseline
// computes the same vectors as length buckets (padding is masked out of
// every pooling mode), so the bucketing gain compares equal work.
func TestPadBucketsToKeepsOutputs(t *testing.T) {
	for _, pooling := range []jobs.Pooling{jobs.PoolingMean, jobs.PoolingCLS, jobs.PoolingMax} {
		t.Run(string(pooling), func(t *testing.T) {
			spec, _, _ := textSpec(t, pooling, "l2", 48)
			bucketed := loadModel(t, spec)
			padded := loadModel(t, spec)
			padded.PadBucketsTo(48)
			if padded.padTo != 48 || bucketed.padTo != 0 {
				t.Fatalf("padTo: padded %d, bucketed %d", padded.padTo, bucketed.padTo)
			}
			rec := titlesRecord(textCorpus(200), nil)
			defer rec.Release()
			_, want := infer(t, bucketed, rec)
			_, got := infer(t, padded, rec)
			w := want.Column(0).(*array.List).ListValues().(*array.Float32)
			g := got.Column(0).(*array.List).ListValues().(*array.Float32)
			if g.Len() != w.Len() || g.Len() == 0 {
				t.Fatalf("%d values padded, %d bucketed", g.Len(), w.Len())
			}
			for i := range w.Len() {
				if d := math.Abs(float64(g.Value(i) - w.Value(i))); d > 1e-5 {
					t.Fatalf("value %d: %v padded, %v bucketed", i, g.Value(i), w.Value(i))
				}
			}
		})
	}
}
