package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// maxWithin is the reference: the largest magnitude bits against lim's.
func maxWithin(s []float32, lim float32) bool {
	var m uint32
	for _, v := range s {
		m = max(m, math.Float32bits(v)&(1<<31-1))
	}
	return m <= math.Float32bits(lim)
}

// TestAllWithinMatchesMax: the OR-of-differences test answers as the
// largest magnitude does, on random bit patterns (NaNs, infinities,
// subnormals, signed zeros among them), lengths 0-10 (the unrolled loop and
// its tail) and several limits.
func TestAllWithinMatchesMax(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	specials := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-45, 3e38}
	for range 200000 {
		n := r.IntN(11)
		s := make([]float32, n)
		for i := range s {
			if r.IntN(3) == 0 {
				s[i] = specials[r.IntN(len(specials))]
			} else {
				s[i] = math.Float32frombits(r.Uint32())
			}
		}
		for _, lim := range []float32{math.MaxFloat32, 1, 1e-30} {
			if got, want := allWithin(s, lim), maxWithin(s, lim); got != want {
				t.Fatalf("%v, lim %v: allWithin %v, the largest magnitude says %v", s, lim, got, want)
			}
		}
	}
}
