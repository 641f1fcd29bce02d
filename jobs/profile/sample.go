package profile

import (
	"cmp"
	"math"
	"slices"
)

// The key sample is a bottom-k sample: the k keys with the smallest
// hashes. A Builder appends candidates (keys whose hash is below the
// current bound) to an unordered buffer; when the buffer reaches twice the
// sample's size it finds the k-th smallest distinct hash by sorting the
// bare hashes, keeps the entries up to it, and that hash becomes the bound.
// So a row costs a hash and a compare, and a candidate a few nanoseconds;
// the entries are ordered once, when the profile is taken. A shard of a
// large run also starts with a bound (Options.Cap, from SampleCap), so it
// keeps only the keys its run's sample can take.

// compareSampled orders samples by hash, then key (equal hash and key is
// the same key seen twice).
func compareSampled(a, b Sampled) int {
	if c := cmp.Compare(a.Hash, b.Hash); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// mergeSamples merges two samples ordered by compareSampled into one of at
// most k entries, each key once; a's entry wins for a key in both.
func mergeSamples(a, b []Sampled, k int) []Sampled {
	k = max(k, 0)
	out := make([]Sampled, 0, min(len(a)+len(b), k))
	i, j := 0, 0
	for len(out) < k && (i < len(a) || j < len(b)) {
		var next Sampled
		switch {
		case j >= len(b):
			next, i = a[i], i+1
		case i >= len(a):
			next, j = b[j], j+1
		default:
			switch c := compareSampled(a[i], b[j]); {
			case c < 0:
				next, i = a[i], i+1
			case c > 0:
				next, j = b[j], j+1
			default:
				next, i, j = a[i], i+1, j+1
			}
		}
		if n := len(out); n > 0 && compareSampled(out[n-1], next) == 0 {
			continue
		}
		out = append(out, next)
	}
	return out
}

// shrink cuts the Builder's entries to those with the k smallest distinct
// hashes and lowers the bound to the largest of them. Entries with equal
// hashes are all kept (the same key twice, or a collision); Profile's sort
// settles them. The entries kept by the last shrink are a prefix of
// b.entries whose distinct hashes b.kept holds in order, so a shrink sorts
// only the hashes that arrived since and merges the two.
func (b *Builder) shrink() {
	k := b.opts.SampleSize
	fresh := b.hashes[:0]
	for i := b.nKept; i < len(b.entries); i++ {
		fresh = append(fresh, b.entries[i].Hash)
	}
	slices.Sort(fresh)
	merged := b.spare[:0]
	i, j := 0, 0
	for len(merged) < k && (i < len(b.kept) || j < len(fresh)) {
		var h uint64
		if j >= len(fresh) || (i < len(b.kept) && b.kept[i] <= fresh[j]) {
			h, i = b.kept[i], i+1
		} else {
			h, j = fresh[j], j+1
		}
		if n := len(merged); n == 0 || merged[n-1] != h {
			merged = append(merged, h)
		}
	}
	b.hashes, b.spare, b.kept = fresh, b.kept, merged
	if len(merged) == k {
		b.limit = merged[k-1]
		b.entries = slices.DeleteFunc(b.entries, func(s Sampled) bool { return s.Hash > b.limit })
	}
	b.nKept = len(b.entries)
}

// sample is the Builder's sample in order: its entries sorted, each key
// once, at most k.
func (b *Builder) sample() []Sampled {
	b.shrink()
	slices.SortFunc(b.entries, compareSampled)
	b.entries = slices.CompactFunc(b.entries, func(x, y Sampled) bool { return compareSampled(x, y) == 0 })
	return slices.Clone(b.entries[:min(len(b.entries), b.opts.SampleSize)])
}

// capSafety is how many times the expected key count of a run's sample a
// shard's cap leaves room for.
const capSafety = 8

// SampleCap is the Options.Cap for a shard of a run of about plannedKeys
// keys with a sample of size k: a hash below which the run's k smallest
// fall with overwhelming probability (room for capSafety×k keys when keys
// are uniform in hash). A shard then keeps about capSafety×k/shards keys
// instead of its own k smallest, most of which the merge would drop. When
// the run ends up with fewer than plannedKeys/capSafety keys the sample
// is smaller than k, still every key below the cap (its margin says so).
// 0 (no cap) for runs too small to need one.
func SampleCap(k int, plannedKeys int64) uint64 {
	room := uint64(capSafety) * uint64(max(k, 0))
	if k <= 0 || plannedKeys <= int64(room) {
		return 0
	}
	return math.MaxUint64 / uint64(plannedKeys) * room
}
