package profile

import "math"

// Histogram is two fields' values over the same equal-width bins, as
// shares of each field's values: how a view draws the published version's
// distribution of an output beside a new run's.
type Histogram struct {
	// Edges are the bins' bounds (len(Old)+1 of them).
	Edges []float64
	// Old and New are each field's share of values per bin (nil for a
	// field that was not given or has no values).
	Old, New []float64
}

// Histograms bins old's and new's sketched values (either may be nil) into
// bins equal-width bins over both fields' range. Values come from the
// sketches, so each lies within the sketch's relative accuracy (1%) of
// the true one.
func Histograms(old, new *Field, bins int) Histogram {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, f := range []*Field{old, new} {
		if f != nil && f.Values > 0 {
			lo, hi = math.Min(lo, f.Min), math.Max(hi, f.Max)
		}
	}
	if math.IsInf(lo, 1) || bins < 1 {
		return Histogram{}
	}
	if hi <= lo {
		bins, hi = 1, lo+1
	}
	h := Histogram{Edges: make([]float64, bins+1)}
	for i := range h.Edges {
		h.Edges[i] = lo + (hi-lo)*float64(i)/float64(bins)
	}
	shares := func(f *Field) []float64 {
		if f == nil || f.Values == 0 {
			return nil
		}
		out := make([]float64, bins)
		total := 0.0
		f.sketch().ForEach(func(v, c float64) bool {
			i := int(float64(bins) * (v - lo) / (hi - lo))
			out[min(max(i, 0), bins-1)] += c
			total += c
			return false
		})
		if total > 0 {
			for i := range out {
				out[i] /= total
			}
		}
		return out
	}
	h.Old, h.New = shares(old), shares(new)
	return h
}
