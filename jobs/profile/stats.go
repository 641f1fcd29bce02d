package profile

import (
	"fmt"
	"math"
	"slices"
)

// psiBins is the bins PSI compares: the published version's deciles.
const psiBins = 10

// psiFloor keeps an empty bin's share finite in PSI's logarithm.
const psiFloor = 1e-4

// PSI is the population stability index of new's values against old's,
// over bins at old's deciles (from its sketch): Σ (n−o)·ln(n/o). Below 0.1
// is usually read as no shift, above 0.25 as a large one.
func PSI(old, new *Field) (float64, error) {
	os, ns := old.sketch(), new.sketch()
	if os.IsEmpty() || ns.IsEmpty() {
		return 0, fmt.Errorf("no values to compare (published %d, new %d)", old.Values, new.Values)
	}
	qs := make([]float64, 0, psiBins-1)
	for i := 1; i < psiBins; i++ {
		qs = append(qs, float64(i)/psiBins)
	}
	edges, err := os.GetValuesAtQuantiles(qs)
	if err != nil {
		return 0, err
	}
	edges = slices.Compact(edges)
	shares := func(f *Field) []float64 {
		out := make([]float64, len(edges)+1)
		total := 0.0
		f.sketch().ForEach(func(v, c float64) bool {
			i, _ := slices.BinarySearch(edges, v) // v <= edges[i]
			out[i] += c
			total += c
			return false
		})
		for i := range out {
			out[i] = math.Max(out[i]/total, psiFloor)
		}
		return out
	}
	o, n := shares(old), shares(new)
	psi := 0.0
	for i := range o {
		psi += (n[i] - o[i]) * math.Log(n[i]/o[i])
	}
	return psi, nil
}

// Estimate is a mean over the key sample with its 95% margin of error
// (1.96 standard errors) and the keys it rests on.
type Estimate struct {
	Mean   float64
	Margin float64
	N      int
}

// String reads "0.032 ± 0.008 (95%, n=2000 sampled keys)".
func (e Estimate) String() string {
	return fmt.Sprintf("±%.3g (95%%, n=%d sampled keys)", e.Margin, e.N)
}

func estimate(xs []float64) Estimate {
	n := len(xs)
	if n == 0 {
		return Estimate{}
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	v := 0.0
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	sd := 0.0
	if n > 1 {
		sd = math.Sqrt(v / float64(n-1))
	}
	return Estimate{Mean: mean, Margin: 1.96 * sd / math.Sqrt(float64(n)), N: n}
}

// threshold is the largest hash below which both samples hold every key
// of their version: a key of old with a hash up to it is in new's sample
// exactly when it is in the new version.
func threshold(a, b *Profile) uint64 {
	return min(a.covered(), b.covered())
}

// covered is the largest hash up to which p's sample holds every key of
// its version: its last hash when full, else just below its cap (all of
// them when it has none).
func (p *Profile) covered() uint64 {
	switch {
	case len(p.Sample) >= p.SampleSize && len(p.Sample) > 0:
		return p.Sample[len(p.Sample)-1].Hash
	case p.Cap != 0:
		return p.Cap - 1
	}
	return math.MaxUint64
}

// pairs calls f for each sampled key of old (up to the common threshold)
// with its entry in new, nil when new lacks the key.
func pairs(old, new *Profile, f func(o, n *Sampled)) {
	t := threshold(old, new)
	idx := make(map[string]*Sampled, len(new.Sample))
	for i := range new.Sample {
		idx[new.Sample[i].Key] = &new.Sample[i]
	}
	for i := range old.Sample {
		o := &old.Sample[i]
		if o.Hash > t {
			break
		}
		f(o, idx[o.Key])
	}
}

// Churn estimates the share of old's keys absent from new.
func Churn(old, new *Profile) Estimate {
	var xs []float64
	pairs(old, new, func(_, n *Sampled) {
		if n == nil {
			xs = append(xs, 1)
		} else {
			xs = append(xs, 0)
		}
	})
	return estimate(xs)
}

// OverlapAtK estimates the mean overlap of field's list in new with the
// list of the same key in old: |new ∩ old| / len(old), over keys in both.
func OverlapAtK(old, new *Profile, field string) Estimate {
	var xs []float64
	pairs(old, new, func(o, n *Sampled) {
		if n == nil {
			return
		}
		ov, nv := o.Values[field], n.Values[field]
		if len(ov) == 0 {
			return
		}
		set := make(map[string]bool, len(ov))
		for _, v := range ov {
			set[fmt.Sprint(v)] = true
		}
		hit := 0
		for _, v := range nv {
			if set[fmt.Sprint(v)] {
				hit++
				delete(set, fmt.Sprint(v))
			}
		}
		xs = append(xs, float64(hit)/float64(len(ov)))
	})
	return estimate(xs)
}

// Cosine estimates the mean cosine similarity of field's vector in new
// with the vector of the same key in old, over keys in both.
func Cosine(old, new *Profile, field string) Estimate {
	var xs []float64
	pairs(old, new, func(o, n *Sampled) {
		if n == nil {
			return
		}
		ov, nv := o.Values[field], n.Values[field]
		if len(ov) == 0 || len(ov) != len(nv) {
			return
		}
		var dot, a, b float64
		for i := range ov {
			x, ok1 := ov[i].(float64)
			y, ok2 := nv[i].(float64)
			if !ok1 || !ok2 {
				return
			}
			dot += x * y
			a += x * x
			b += y * y
		}
		if a == 0 || b == 0 {
			xs = append(xs, 0)
			return
		}
		xs = append(xs, dot/math.Sqrt(a*b))
	})
	return estimate(xs)
}
