// Portions of this file (the Dragonbox float32 digit generation) follow
// Go's internal/strconv/ftoadbox.go: Copyright 2025 The Go Authors. All
// rights reserved. Use of that source code is governed by a BSD-style
// license that can be found in Go's LICENSE file.

// Package floattext writes float32 values as the shortest decimal text that
// reads back to them, as strconv does, at about half its cost: the sinks'
// JSON records and the lookup API's live answers format whole vectors of
// them, and both must print the same bytes for the same value.
package floattext

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
	"slices"
)

// AppendFloat32 appends the shortest decimal text that reads back to f,
// byte for byte what strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
// writes, at a fraction of its cost: float32 vectors (embeddings) are most
// of a wide record's bytes, and strconv spends more on its generic layout
// (a decimal slice, then %g over it) than on finding the digits.
//
// The digits come from Dragonbox (Junekey Jeon, 2020), the algorithm of
// Go's own strconv since Go 1.26 (internal/strconv/ftoadbox.go, BSD
// licence, whose float32 path this follows step by step), so the two agree
// on every value, ties included; the layout follows strconv's %g rules
// (exponent form below 1e-4 and from 1e6) with word-sized stores.
//
// It may write up to 32 bytes past the text it appends, inside dst's spare
// capacity (never past cap), which callers that own dst can ignore. f must
// be finite: callers reject NaN and ±Inf (JSON has neither).
// TestAppendFloat32MatchesStrconv compares the two on millions of values.
func AppendFloat32(dst []byte, f float32) []byte {
	if cap(dst)-len(dst) < f32TextRoom {
		dst = slices.Grow(dst, f32TextRoom)
	}
	n := len(dst)
	k := formatFloat32((*[f32TextRoom]byte)(dst[n:n+f32TextRoom]), f)
	return dst[:n+k]
}

// AppendFloat32s appends vals as comma-separated AppendFloat32 texts (a
// JSON array's inside), growing dst once for the whole run. At a NaN or
// ±Inf it stops and returns that value's index (else -1).
func AppendFloat32s(dst []byte, vals []float32) ([]byte, int) {
	// 15 bytes of text and a comma at most per value, and the room the
	// last one's stores may use.
	if need := 16*len(vals) + f32TextRoom; cap(dst)-len(dst) < need {
		dst = slices.Grow(dst, need)
	}
	n := len(dst)
	buf := dst[:cap(dst)]
	for i, f := range vals {
		if !Finite32(f) {
			return buf[:n], i
		}
		if i > 0 {
			buf[n] = ','
			n++
		}
		n += formatFloat32((*[f32TextRoom]byte)(buf[n:n+f32TextRoom]), f)
	}
	return buf[:n], -1
}

// Finite32 reports whether f is neither NaN nor ±Inf (exponent bits not
// all ones): JSON has neither, so writers reject them before formatting.
func Finite32(f float32) bool { return math.Float32bits(f)&0x7f800000 != 0x7f800000 }

// f32TextRoom is the spare capacity formatFloat32 writes into: the longest
// text is 15 bytes ("-1.2345678e-38"), and its word stores may run up to 16
// bytes past where a piece starts.
const f32TextRoom = 40

// formatFloat32 writes f's shortest %g text at the start of out and returns
// its length.
func formatFloat32(out *[f32TextRoom]byte, f float32) int {
	u := math.Float32bits(f)
	out[0] = '-' // kept only for a negative f: branchless on random signs
	pos := int(u >> 31)
	ieeeMant, ieeeExp := u&(1<<23-1), int((u>>23)&0xff)
	if ieeeMant == 0 && ieeeExp == 0 {
		out[pos] = '0'
		return pos + 1
	}
	var mant uint32
	var exp int
	if ieeeExp == 0 { // subnormal
		mant, exp = ieeeMant, 1-127-23
	} else {
		mant, exp = ieeeMant|1<<23, ieeeExp-127-23
	}
	digits, e10 := dboxFtoa32(mant, exp, ieeeExp == 0)

	// The digits as ASCII in two little-endian words: w0 the first eight
	// (fewer, then zero bytes after them), w1 the ninth if any.
	nd := decimalLen32(digits)
	// (Selects, not branches: 7, 8 and 9 digits are all common.)
	q := digits / 10
	d8, w1, n8 := digits, uint64(0), nd
	if nd > 8 {
		d8, w1, n8 = q, uint64('0'+digits-q*10), 8
	}
	w0 := swar8(d8) >> (64 - 8*n8)
	dp := nd + e10 // value = 0.digits × 10^dp
	if x := dp - 1; x < -4 || x >= 6 {
		// %e: d[.ddd]e±XX
		out[pos] = byte(w0)
		pos++
		if nd > 1 {
			out[pos] = '.'
			binary.LittleEndian.PutUint64(out[pos+1:], w0>>8|w1<<56)
			pos += nd
		}
		out[pos] = 'e'
		if x < 0 {
			out[pos+1] = '-'
			x = -x
		} else {
			out[pos+1] = '+'
		}
		pos += 2
		if x >= 100 {
			out[pos] = byte('0' + x/100)
			x %= 100
			pos++
		}
		out[pos], out[pos+1] = byte('0'+x/10), byte('0'+x%10)
		return pos + 2
	}
	if dp >= nd { // ddd000: at most 5 zeros (x < 6)
		binary.LittleEndian.PutUint64(out[pos:], w0)
		binary.LittleEndian.PutUint64(out[pos+8:], w1)
		binary.LittleEndian.PutUint64(out[pos+nd:], asciiZeros)
		return pos + dp
	}
	// 0.000ddd is d.ddd for the digits behind 1-dp zeros (at most 4: x ≥
	// -4), the point after the first: shifted in with selects, not a
	// branch, as both forms are common in a vector.
	if dp <= 0 {
		z := uint(8 * (1 - dp)) // 8..32
		w1 = w1<<z | w0>>(64-z)
		w0 = w0<<z | asciiZeros>>(64-z)
		nd += 1 - dp
		dp = 1
	}
	// d.ddd: the word stores lay all digits, the point then overwrites
	// digit dp, and the digits from dp on (at most 12) go after it.
	binary.LittleEndian.PutUint64(out[pos:], w0)
	out[pos+dp] = '.'
	s := uint(8 * dp) // 8..64; Go shifts by ≥ 64 give 0
	binary.LittleEndian.PutUint64(out[pos+dp+1:], w0>>s|w1<<(64-s))
	binary.LittleEndian.PutUint64(out[pos+dp+9:], w1>>s)
	return pos + nd + 1
}

// asciiZeros is "00000000" as a little-endian word.
var asciiZeros = binary.LittleEndian.Uint64([]byte("00000000"))

// swar8 is v < 10^8 as eight ASCII digits (leading zeros included) in a
// little-endian word, first digit in the lowest byte: two 4-digit halves,
// then four 2-digit quarters, then eight digits, each step one multiply
// for all lanes at once (the divisions by 100 and 10 as multiply-shifts
// that are exact over each lane's range).
func swar8(v uint32) uint64 {
	hi := v / 10000
	x := uint64(hi) | uint64(v-hi*10000)<<32 // lanes of 32 bits, < 10^4
	q := (x * 5243 >> 19) & 0x0000007f_0000007f
	x = q | (x-q*100)<<16 // lanes of 16 bits, < 100
	q = (x * 103 >> 10) & 0x000f_000f_000f_000f
	x = q | (x-q*10)<<8 // lanes of 8 bits, < 10
	return x + 0x30303030_30303030
}

// pow10u32 holds 10^0 … 10^9.
var pow10u32 = [...]uint32{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

// decimalLen32 is the number of decimal digits of v > 0.
func decimalLen32(v uint32) int {
	// ⌊log10(2)·bitlen⌋ + 1 is right or one too many.
	n := (bits.Len32(v) * 1233) >> 12
	if v >= pow10u32[n] {
		n++
	}
	return n
}

// dboxFtoa32 is Dragonbox's shortest decimal for the float mant × 2^exp
// (mant with its implicit bit unless denorm): digits × 10^e10, as Go's
// strconv computes it (dboxFtoa32 in internal/strconv/ftoadbox.go,
// Algorithms 5.2, 5.4 and 5.6 of the paper).
func dboxFtoa32(mant uint32, exp int, denorm bool) (digits uint32, e10 int) {
	if mant == 1<<23 && !denorm {
		// Algorithm 5.6: a power of two, whose interval is asymmetric.
		k0 := -mulLog10_2MinusLog10_4Over3(exp)
		φ, β := dboxPow32(k0, exp)
		xi := uint32((φ - φ>>(23+2)) >> (64 - 23 - 1 - β))
		zi := uint32((φ + φ>>(23+1)) >> (64 - 23 - 1 - β))
		if exp != 2 && exp != 3 {
			xi++
		}
		q := zi / 10
		if xi <= q*10 {
			q, zeros := trimZeros32(q)
			return q, -k0 + 1 + zeros
		}
		yru := uint32(φ>>(64-23-2-β)+1) / 2
		if exp == -77 && yru%2 != 0 {
			yru--
		} else if yru < xi {
			yru++
		}
		return yru, -k0
	}

	// Algorithm 5.2, κ = 1 for float32.
	const (
		p10κ  = 10
		p10κ1 = 100
	)
	k0 := -mulLog10_2(exp)
	φ, β := dboxPow32(1+k0, exp)
	r96 := umul96Upper64((mant*2+1)<<β, φ)
	zi, exact := uint32(r96>>32), uint32(r96) == 0
	s, r := zi/p10κ1, zi%p10κ1
	δi := uint32(φ >> (64 - 1 - β))
	if r < δi {
		if r != 0 || !exact || mant%2 == 0 {
			s, zeros := trimZeros32(s)
			return s, -k0 + 1 + zeros
		}
		s--
		r = p10κ * 10
	} else if r == δi {
		parity, exact := dboxParity32(mant*2-1, φ, β)
		if parity || (exact && mant%2 == 0) {
			s, zeros := trimZeros32(s)
			return s, -k0 + 1 + zeros
		}
	}

	// Algorithm 5.4.
	D := r + p10κ/2 - δi/2
	t, ρ := D/p10κ, D%p10κ
	yru := 10*s + t
	if ρ == 0 {
		parity, exact := dboxParity32(mant*2, φ, β)
		if parity != ((D-p10κ/2)%2 != 0) || exact && yru%2 != 0 {
			yru--
		}
	}
	return yru, -k0
}

// umul96Upper64 is the upper 64 bits of the 96-bit x × y.
func umul96Upper64(x uint32, y uint64) uint64 {
	return uint64(x)*(y>>32) + (uint64(x)*uint64(uint32(y)))>>32
}

// dboxParity32 is the parity of the integer part of x × φ scaled by β,
// and whether its fractional part is zero (section 5.2.1).
func dboxParity32(mant2 uint32, φ uint64, β int) (parity bool, isInt bool) {
	r := uint64(mant2) * φ
	return (r>>(64-β))&1 != 0, uint32(r>>(32-β)) == 0
}

// mulLog10_2 is ⌊x·log10(2)⌋ for |x| ≤ 1600.
func mulLog10_2(x int) int { return (x * 78913) >> 18 }

// mulLog2_10 is ⌊x·log2(10)⌋ for |x| ≤ 500.
func mulLog2_10(x int) int { return (x * 108853) >> 15 }

// mulLog10_2MinusLog10_4Over3 is ⌊x·log10(2) − log10(4/3)⌋.
func mulLog10_2MinusLog10_4Over3(e int) int { return (e*631305 - 261663) >> 21 }

// dboxPow32 is φ̃k, 10^k's 64-bit mantissa (top bit set; rounded up where
// it is not exact), and β, the shift that goes with exponent e.
func dboxPow32(k, e int) (φ uint64, β int) {
	return f32Pow10[k-f32Pow10Min], e + mulLog2_10(k)
}

// The 10^k that float32 needs (k from about -31 to 46), with margin.
const (
	f32Pow10Min = -64
	f32Pow10Max = 64
)

// f32Pow10 holds the top 64 bits of each 10^k normalised to [2^63, 2^64),
// truncated and then, where 10^k is not exactly that (k < 0 or k > 27),
// plus one, as strconv's dboxPow32 takes them from its 128-bit table:
// computed once here rather than pasted.
var f32Pow10 = f32Pow10Table()

func f32Pow10Table() (t [f32Pow10Max - f32Pow10Min + 1]uint64) {
	one, ten := big.NewInt(1), big.NewInt(10)
	for k := f32Pow10Min; k <= f32Pow10Max; k++ {
		var hi *big.Int
		if k >= 0 {
			p := new(big.Int).Exp(ten, big.NewInt(int64(k)), nil)
			if bl := p.BitLen(); bl > 64 {
				hi = p.Rsh(p, uint(bl-64))
			} else {
				hi = p.Lsh(p, uint(64-bl))
			}
		} else {
			d := new(big.Int).Exp(ten, big.NewInt(int64(-k)), nil)
			// ⌊2^(63+bl) / d⌋ lies in [2^63, 2^64) for bl = bitlen(d).
			n := new(big.Int).Lsh(one, uint(63+d.BitLen()))
			hi = n.Quo(n, d)
			if hi.BitLen() < 64 {
				n := new(big.Int).Lsh(one, uint(64+d.BitLen()))
				hi = n.Quo(n, d)
			}
		}
		v := hi.Uint64()
		if k < 0 || k > 27 {
			v++
		}
		t[k-f32Pow10Min] = v
	}
	return t
}

// trimZeros32 removes x's trailing decimal zeros: x / 10^n and n.
func trimZeros32(x uint32) (uint32, int) {
	n := 0
	for x != 0 {
		q := x / 10
		if q*10 != x {
			break
		}
		x = q
		n++
	}
	return x, n
}
