package profile

import (
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/zeebo/xxh3"
)

// bottomK is the reference sample: the k distinct keys with the smallest
// (hash, key), computed by brute force.
func bottomK(keys []int, k int) []Sampled {
	seen := map[int]bool{}
	var all []Sampled
	for _, i := range keys {
		if seen[i] {
			continue
		}
		seen[i] = true
		key := "u" + strconv.Itoa(i)
		all = append(all, Sampled{Hash: xxh3.HashString(key), Key: key})
	}
	slices.SortFunc(all, compareSampled)
	return all[:min(k, len(all))]
}

func sameKeys(t *testing.T, what string, got, want []Sampled) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d sampled keys, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Hash != want[i].Hash {
			t.Fatalf("%s: sample[%d] = %s/%x, want %s/%x", what, i, got[i].Key, got[i].Hash, want[i].Key, want[i].Hash)
		}
	}
}

// TestSampleIsBottomK: across many batches, with keys repeated within and
// across batches (so pending flushes meet duplicates), a Builder's sample
// and the merge of two Builders' samples are exactly the bottom-k of the
// distinct keys, each key once and its values kept.
func TestSampleIsBottomK(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	const k = 300
	var all, first, second []int
	b1 := NewBuilder(Options{Fields: []string{"score", "items"}, SampleFields: []string{"items"}, SampleSize: k})
	b2 := NewBuilder(Options{Fields: []string{"score", "items"}, SampleFields: []string{"items"}, SampleSize: k})
	items := func(i int) []int64 { return []int64{int64(i), int64(i) + 1} }
	for range 40 {
		keys := make([]int, 500)
		for j := range keys {
			keys[j] = rng.IntN(8000)
		}
		rec := batch(t, keys, func(int) float64 { return 0.5 }, items)
		if rng.IntN(2) == 0 {
			b1.Add(rec, 0)
			first = append(first, keys...)
		} else {
			b2.Add(rec, 0)
			second = append(second, keys...)
		}
		rec.Release()
		all = append(all, keys...)
	}
	p1, p2 := b1.Profile(), b2.Profile()
	sameKeys(t, "builder 1", p1.Sample, bottomK(first, k))
	sameKeys(t, "builder 2", p2.Sample, bottomK(second, k))
	for _, s := range p1.Sample {
		i, _ := strconv.Atoi(s.Key[1:])
		if v := s.Values["items"]; len(v) != 2 || v[0] != float64(i) {
			t.Fatalf("key %s: items %v", s.Key, v)
		}
	}
	// A round trip through the stored form, then a merge.
	d1, err := Decode(p1.Encode())
	if err != nil {
		t.Fatal(err)
	}
	d2, err := Decode(p2.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Merge(d2); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "merged", d1.Sample, bottomK(all, k))
}

// buildRun builds the profiles of a run's shards: keys [0, n) cut into
// shards of size n/shards, each Builder capped at capFor(shard rows).
func buildRun(t *testing.T, n, shards, k int, cap uint64) *Profile {
	t.Helper()
	run := New(k)
	per := n / shards
	for s := range shards {
		b := NewBuilder(Options{SampleSize: k, Cap: cap})
		for lo := s * per; lo < (s+1)*per; lo += 1000 {
			keys := make([]int, 0, 1000)
			for i := lo; i < min(lo+1000, (s+1)*per); i++ {
				keys = append(keys, i)
			}
			rec := batch(t, keys, func(int) float64 { return 0.5 }, func(int) []int64 { return nil })
			b.Add(rec, 0)
			rec.Release()
		}
		d, err := Decode(b.Profile().Encode())
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Merge(d); err != nil {
			t.Fatal(err)
		}
	}
	return run
}

// TestSampleCap: shards capped by SampleCap for the run's planned keys
// merge to exactly the uncapped run's sample, each keeping a few times
// k/shards keys; with a cap far too tight (planned keys overestimated 100
// times) the sample is every key below the cap, and same-key comparisons
// stay exact up to it.
func TestSampleCap(t *testing.T) {
	const n, shards, k = 200_000, 20, 300
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	want := bottomK(all, k)
	capped := buildRun(t, n, shards, k, SampleCap(k, n))
	sameKeys(t, "capped run", capped.Sample, want)
	if capped.Cap == 0 {
		t.Fatal("the merged profile lost its cap")
	}
	tight := SampleCap(k, 100*n)
	small := buildRun(t, n, shards, k, tight)
	var below []Sampled
	for _, s := range bottomK(all, n) {
		if s.Hash < tight {
			below = append(below, s)
		}
	}
	sameKeys(t, "tightly capped run", small.Sample, below)
	if len(below) == 0 || len(below) >= k {
		t.Fatalf("%d keys below the tight cap, want some and fewer than %d", len(below), k)
	}
	if e := Churn(small, capped); e.Mean != 0 || e.N != len(below) {
		t.Fatalf("churn between the same keys, one sample tightly capped: %+v, want 0 over %d keys", e, len(below))
	}
	if SampleCap(k, 8*k) != 0 || SampleCap(0, n) != 0 {
		t.Fatal("a run of at most 8k keys, or no sample, needs no cap")
	}
}

// TestDecodeTrustsNoStoredSample: a sample stored by an earlier version
// (JSON) with hashes that are not its keys', out of order and longer than
// its size, decodes to the true bottom-k of its keys.
func TestDecodeTrustsNoStoredSample(t *testing.T) {
	stored := `{"rows":3,"fields":{},"sample":[{"h":9,"k":"u3"},{"h":1,"k":"u1"},{"h":5,"k":"u2"}],"sample_size":2}`
	d, err := Decode(base64.StdEncoding.EncodeToString([]byte(stored)))
	if err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "decoded", d.Sample, bottomK([]int{1, 2, 3}, 2))
}

// FuzzDecode: any stored text decodes to a profile or an ErrCorrupt, never
// a panic, and a decoded profile re-encodes to a form that decodes the same.
func FuzzDecode(f *testing.F) {
	b := NewBuilder(Options{Fields: []string{"score", "items"}, SampleFields: []string{"items"}, SampleSize: 5})
	rec := batch(&testing.T{}, []int{1, 2, 3, 4, 5, 6, 7}, func(i int) float64 { return float64(i) / 10 }, func(i int) []int64 { return []int64{int64(i)} })
	b.Add(rec, 0)
	rec.Release()
	f.Add(b.Profile().Encode())
	f.Add(base64.StdEncoding.EncodeToString([]byte(`{"rows":1,"fields":{"s":{"rows":1,"values":1,"min":1,"max":1}},"sample_size":1}`)))
	f.Add(base64.StdEncoding.EncodeToString([]byte{codecV1, 1, 1, 1, 1, 's', 1, 0, 1}))
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Decode(s)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := Decode(p.Encode())
		if err != nil {
			t.Fatalf("re-encoded profile: %v", err)
		}
		if again.Rows != p.Rows || again.Cap != p.Cap || len(again.Sample) != len(p.Sample) || len(again.Fields) != len(p.Fields) {
			t.Fatalf("round trip: %+v vs %+v", again, p)
		}
	})
}

// BenchmarkBuilderAdd is the per-row cost of a shard's profile on the
// bench's checks (an int64 key, one float32 score, a 2,000-key sample),
// over a shard of 100,000 rows in batches of 1,024, one of a run's 100.
func BenchmarkBuilderAdd(b *testing.B) {
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
	}, nil)
	var recs []arrow.RecordBatch
	rng := rand.New(rand.NewPCG(1, 2))
	for from := 0; from < 100_000; from += 1024 {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, sch)
		for i := from; i < min(from+1024, 100_000); i++ {
			rb.Field(0).(*array.Int64Builder).Append(int64(5_000_000 + i))
			rb.Field(1).(*array.Float32Builder).Append(rng.Float32())
		}
		recs = append(recs, rb.NewRecordBatch())
		rb.Release()
	}
	b.ResetTimer()
	for b.Loop() {
		pb := NewBuilder(Options{Fields: []string{"score"}, SampleSize: 2000, Cap: SampleCap(2000, 100*100_000)})
		for _, r := range recs {
			pb.Add(r, 0)
		}
		_ = pb.Profile()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100_000, "ns/row")
}
