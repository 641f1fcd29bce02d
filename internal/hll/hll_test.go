package hll

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestDistinctAccuracy(t *testing.T) {
	for _, n := range []int{10, 1000, 50_000, 400_000} {
		s := New()
		for i := range n {
			s.AddString(fmt.Sprintf("user-%d", i))
		}
		got := s.Distinct()
		if rel := math.Abs(got-float64(n)) / float64(n); rel > 0.04 {
			t.Errorf("n=%d: Distinct = %.0f (%.2f%% off)", n, got, rel*100)
		}
		if dup, thr := s.Duplicates(); dup > thr {
			t.Errorf("n=%d distinct keys: %.0f duplicates estimated, above the %.0f threshold (false alarm)", n, dup, thr)
		}
	}
}

// TestMergedShardsFindDuplicates: two shards sharing 10% of their keys are
// flagged; disjoint shards are not.
func TestMergedShardsFindDuplicates(t *testing.T) {
	const per = 100_000
	a, b, c := New(), New(), New()
	for i := range per {
		a.AddInt(int64(i))
		b.AddInt(int64(per + i))
		c.AddInt(int64(per - per/10 + i)) // overlaps a's last 10%
	}
	disjoint := New()
	disjoint.Merge(a)
	disjoint.Merge(b)
	if dup, thr := disjoint.Duplicates(); dup > thr {
		t.Fatalf("disjoint shards: %.0f duplicates estimated > %.0f", dup, thr)
	}
	overlap := New()
	overlap.Merge(a)
	overlap.Merge(c)
	dup, thr := overlap.Duplicates()
	if dup < thr {
		t.Fatalf("shards sharing %d keys: %.0f duplicates estimated < threshold %.0f", per/10, dup, thr)
	}
	if math.Abs(dup-per/10) > per/20 {
		t.Fatalf("estimated %.0f duplicates, want about %d", dup, per/10)
	}
}

func TestSmallExact(t *testing.T) {
	s := New()
	for i := range 500 {
		s.AddString(fmt.Sprint(i))
	}
	if dup, thr := s.Duplicates(); dup > thr {
		t.Fatalf("no duplicates in 500 keys: estimate %.2f above threshold %.2f", dup, thr)
	}
	for i := range 50 {
		s.AddString(fmt.Sprint(i * 3))
	}
	if dup, thr := s.Duplicates(); dup < thr {
		t.Fatalf("50 duplicates in 550 keys: estimate %.2f below threshold %.2f", dup, thr)
	}
}

func TestEncodeDecode(t *testing.T) {
	s := New()
	for i := range 1000 {
		s.AddInt(int64(i))
	}
	got, err := Decode(s.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Count() != s.Count() || got.Distinct() != s.Distinct() {
		t.Fatalf("round trip: %d/%f, want %d/%f", got.Count(), got.Distinct(), s.Count(), s.Distinct())
	}
	for _, bad := range []string{"", "!!", "AAAA"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) succeeded", bad)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(New().Encode())
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		if sk, err := Decode(s); err == nil {
			_ = sk.Distinct()
		}
	})
}

// TestHashIntIsXXH3: the inline integer hash is xxh3 of the 8
// little-endian bytes, so sketches stored by earlier versions still merge.
func TestHashIntIsXXH3(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ks := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 32, 0xdeadbeef}
	for range 100000 {
		ks = append(ks, int64(r.Uint64()))
	}
	for _, k := range ks {
		b := binary.LittleEndian.AppendUint64(nil, uint64(k))
		if got, want := hashInt(k), xxh3.Hash(b); got != want {
			t.Fatalf("hashInt(%d) = %#x, xxh3 %#x", k, got, want)
		}
	}
}
