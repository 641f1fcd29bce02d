package profile

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestHashIntMatchesText: the fast integer key hash equals xxh3 of the
// key's decimal text on every key below 10^6, around every power of ten,
// at the extremes, and on a million random keys of every size.
func TestHashIntMatchesText(t *testing.T) {
	check := func(v int64) {
		if got, want := hashInt(v), xxh3.HashString(strconv.FormatInt(v, 10)); got != want {
			t.Fatalf("hashInt(%d) = %x, want %x", v, got, want)
		}
	}
	for v := int64(-10); v < 1_000_000; v++ {
		check(v)
	}
	for p := int64(1); p <= 1e18; p *= 10 {
		for d := int64(-2); d <= 2; d++ {
			check(p + d)
			check(-p + d)
		}
	}
	for _, v := range []int64{math.MaxInt64, math.MinInt64, 99_999_999, 100_000_000, 12_345_678} {
		check(v)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1_000_000 {
		check(rng.Int64N(1e8))
		check(rng.Int64() >> rng.IntN(63))
	}
}

// FuzzHashInt: the same equality on any int64.
func FuzzHashInt(f *testing.F) {
	f.Add(int64(12345678))
	f.Fuzz(func(t *testing.T, v int64) {
		if got, want := hashInt(v), xxh3.HashString(strconv.FormatInt(v, 10)); got != want {
			t.Fatalf("hashInt(%d) = %x, want %x", v, got, want)
		}
	})
}

func BenchmarkHashInt(b *testing.B) {
	b.Run("swar", func(b *testing.B) {
		var s uint64
		for i := 0; b.Loop(); i++ {
			s += hashInt(int64(5_000_000 + i&0xfffff))
		}
		_ = s
	})
	b.Run("strconv", func(b *testing.B) {
		var s uint64
		var buf [20]byte
		for i := 0; b.Loop(); i++ {
			s += xxh3.Hash(strconv.AppendInt(buf[:0], int64(5_000_000+i&0xfffff), 10))
		}
		_ = s
	})
}
