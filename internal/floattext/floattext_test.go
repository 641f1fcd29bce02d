package floattext

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// TestAppendFloat32MatchesStrconv checks AppendFloat32 against strconv on
// the values where shortest-digit algorithms go wrong (powers of two,
// subnormals, the extremes, integers, round decimals) and on millions of
// random bit patterns over the whole float32 range.
func TestAppendFloat32MatchesStrconv(t *testing.T) {
	check := func(f float32) {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return
		}
		want := strconv.AppendFloat(nil, float64(f), 'g', -1, 32)
		got := AppendFloat32(nil, f)
		if string(got) != string(want) {
			t.Fatalf("AppendFloat32(%#08x) = %s, strconv %s", math.Float32bits(f), got, want)
		}
	}
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.1, 0.2, 0.3, 1e-4, 9.9999e-5, 1e-5,
		123456, 999999, 1e6, 1234567, 1e7, 1e10, 3.4028235e38, -3.4028235e38, 1.1754944e-38, 1e-45, 1.4e-45,
		math.MaxFloat32, math.SmallestNonzeroFloat32, 16777216, 16777217, 0.33333334, -0.07983688, -1.1333908} {
		check(f)
	}
	for e := -149; e <= 127; e++ { // every power of two and its neighbours
		p := float32(math.Ldexp(1, e))
		check(p)
		check(math.Nextafter32(p, 0))
		check(math.Nextafter32(p, math.MaxFloat32))
	}
	for i := range 1 << 16 { // small integers, subnormals, decimals
		check(float32(i))
		check(math.Float32frombits(uint32(i)))
		check(float32(i) / 1000)
		check(float32(i) * 1e-9)
	}
	n := 3_000_000
	if testing.Short() {
		n = 300_000
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		check(math.Float32frombits(r.Uint32()))
		check(float32(r.NormFloat64())) // embedding-like values
	}
}

func BenchmarkAppendFloat32(b *testing.B) {
	vals := make([]float32, 1024)
	for i := range vals {
		vals[i] = embeddingValue(i)
	}
	buf := make([]byte, 0, 64)
	b.Run("AppendFloat32", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			buf = AppendFloat32(buf[:0], vals[i%len(vals)])
		}
	})
	b.Run("strconv", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			buf = strconv.AppendFloat(buf[:0], float64(vals[i%len(vals)]), 'g', -1, 32)
		}
	})
}

// TestAppendFloat32sMatchesStrconv checks the list form against strconv
// joined by commas, after a prefix and into buffers of every spare
// capacity (its word stores must stay inside cap and leave the prefix),
// and that it stops at the first NaN or ±Inf with its index.
func TestAppendFloat32sMatchesStrconv(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 40 {
		vals := make([]float32, n)
		var want []byte
		want = append(want, "pre"...)
		for i := range vals {
			switch i % 3 {
			case 0:
				vals[i] = float32(r.NormFloat64())
			case 1:
				vals[i] = math.Float32frombits(r.Uint32()&^0x7f800000 | uint32(r.IntN(255))<<23)
			default:
				vals[i] = float32(r.IntN(2_000_000)) / 1000
			}
			if i > 0 {
				want = append(want, ',')
			}
			want = strconv.AppendFloat(want, float64(vals[i]), 'g', -1, 32)
		}
		for spare := range 3 * f32TextRoom {
			dst := make([]byte, 3, 3+spare)
			copy(dst, "pre")
			got, bad := AppendFloat32s(dst, vals)
			if bad != -1 || string(got) != string(want) {
				t.Fatalf("n=%d spare=%d: got %q (bad %d), want %q", n, spare, got, bad, want)
			}
		}
	}
	for _, nf := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		vals := []float32{1.5, -2, nf, 3}
		got, bad := AppendFloat32s(nil, vals)
		if bad != 2 || string(got) != "1.5,-2" {
			t.Fatalf("non-finite %v: got %q, index %d; want \"1.5,-2\", 2", nf, got, bad)
		}
	}
}

func BenchmarkAppendFloat32s(b *testing.B) {
	vals := make([]float32, 100)
	for i := range vals {
		vals[i] = embeddingValue(i)
	}
	buf := make([]byte, 0, 4096)
	for b.Loop() {
		buf, _ = AppendFloat32s(buf[:0], vals)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(vals)), "ns/float")
}

// TestAppendFloat32Exhaustive compares AppendFloat32 with strconv on every
// finite non-negative float32 (negative ones differ only by the sign
// byte, which the random checks cover). It takes minutes, so it runs only
// with PRECOG_F32_EXHAUSTIVE=1.
func TestAppendFloat32Exhaustive(t *testing.T) {
	if os.Getenv("PRECOG_F32_EXHAUSTIVE") != "1" {
		t.Skip("set PRECOG_F32_EXHAUSTIVE=1 to check all 2^31 values")
	}
	var got, want []byte
	for u := uint32(0); u < 0x7f800000; u++ {
		f := math.Float32frombits(u)
		got = AppendFloat32(got[:0], f)
		want = strconv.AppendFloat(want[:0], float64(f), 'g', -1, 32)
		if string(got) != string(want) {
			t.Fatalf("AppendFloat32(%#08x) = %s, strconv %s", u, got, want)
		}
	}
}

// embeddingValue is a deterministic value spread like an embedding's
// components (uniform in about ±1.3, 7–9 significant digits).
func embeddingValue(i int) float32 {
	x := uint32(i*2654435761) ^ uint32(7*40503+1)
	x ^= x >> 15
	x *= 2246822519
	x ^= x >> 13
	return (float32(x%2000001) - 1e6) / 7.7e5
}
