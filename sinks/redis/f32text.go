package redis

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
)

// appendFloat32 appends the shortest decimal text that reads back to f,
// byte for byte what strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
// writes, at about a third of its cost: float32 vectors (embeddings) are
// most of a wide record's bytes, and strconv's generic path (a decimal
// slice, then %g formatting over it) spent more on formatting than on
// finding the digits. The digits come from Ryū for 32-bit floats (Ulf
// Adams, PLDI 2018: the f2s algorithm of github.com/ulfjack/ryu), the
// layout from strconv's %g rules (exponent form below 1e-4 and from 1e6).
// f must be finite; callers reject NaN and ±Inf (JSON has neither).
// TestAppendFloat32MatchesStrconv compares the two on millions of values.
func appendFloat32(dst []byte, f float32) []byte {
	u := math.Float32bits(f)
	if u&(1<<31) != 0 {
		dst = append(dst, '-')
	}
	ieeeMant, ieeeExp := u&(1<<23-1), (u>>23)&0xff
	switch {
	case ieeeMant == 0 && ieeeExp == 0:
		return append(dst, '0')
	case ieeeMant == 0:
		// A power of two whose two shortest candidates can tie: strconv
		// (Dragonbox) breaks the tie upwards where Ryū picks the even one.
		// 254 values: leave them to strconv rather than differ.
		return strconv.AppendFloat(dst, math.Abs(float64(f)), 'g', -1, 32)
	}
	mant, exp := f2d(ieeeMant, ieeeExp)
	for mant%10 == 0 { // keep nd minimal, as strconv's digits are
		mant /= 10
		exp++
	}
	var buf [10]byte
	i := len(buf)
	for m := mant; ; {
		i--
		buf[i] = byte('0' + m%10)
		m /= 10
		if m == 0 {
			break
		}
	}
	digs := buf[i:]
	nd := len(digs)
	dp := nd + int(exp) // decimal point position: value = 0.digs × 10^dp
	if x := dp - 1; x < -4 || x >= 6 {
		// %e: d[.ddd]e±XX
		dst = append(dst, digs[0])
		if nd > 1 {
			dst = append(dst, '.')
			dst = append(dst, digs[1:]...)
		}
		dst = append(dst, 'e')
		if x < 0 {
			dst = append(dst, '-')
			x = -x
		} else {
			dst = append(dst, '+')
		}
		if x >= 100 {
			dst = append(dst, byte('0'+x/100))
			x %= 100
			return append(dst, byte('0'+x/10), byte('0'+x%10))
		}
		return append(dst, byte('0'+x/10), byte('0'+x%10))
	}
	switch {
	case dp <= 0: // 0.000ddd
		dst = append(dst, '0', '.')
		for ; dp < 0; dp++ {
			dst = append(dst, '0')
		}
		return append(dst, digs...)
	case dp >= nd: // ddd000
		dst = append(dst, digs...)
		for ; dp > nd; dp-- {
			dst = append(dst, '0')
		}
		return dst
	}
	dst = append(dst, digs[:dp]...)
	dst = append(dst, '.')
	return append(dst, digs[dp:]...)
}

// Ryū's constants and tables for float32 (f2s.c, the table variant).
const (
	f32MantBits       = 23
	f32Bias           = 127
	f32Pow5InvBitcnt  = 59
	f32Pow5Bitcnt     = 61
	f32Pow5InvTabSize = 31
	f32Pow5TabSize    = 47
)

// f32Pow5InvSplit[i] = ⌊2^(pow5bits(i)-1+59) / 5^i⌋ + 1 and f32Pow5Split[i]
// = 5^i scaled to 61 bits (truncated): computed once rather than pasted.
var f32Pow5InvSplit, f32Pow5Split = f32Tables()

func f32Tables() (inv [f32Pow5InvTabSize]uint64, pow [f32Pow5TabSize]uint64) {
	five := big.NewInt(5)
	p := big.NewInt(1)
	for i := 0; i < f32Pow5TabSize; i++ {
		if i > 0 {
			p.Mul(p, five)
		}
		bl := p.BitLen()
		q := new(big.Int)
		if bl > f32Pow5Bitcnt {
			q.Rsh(p, uint(bl-f32Pow5Bitcnt))
		} else {
			q.Lsh(p, uint(f32Pow5Bitcnt-bl))
		}
		pow[i] = q.Uint64()
		if i < f32Pow5InvTabSize {
			n := new(big.Int).Lsh(big.NewInt(1), uint(pow5bits(int32(i))-1+f32Pow5InvBitcnt))
			n.Quo(n, p)
			inv[i] = n.Uint64() + 1
		}
	}
	return inv, pow
}

// pow5bits is ⌈log2(5^e)⌉ for e > 0 (1 for e = 0).
func pow5bits(e int32) int32 { return int32((uint32(e)*1217359)>>19) + 1 }

// log10Pow2 is ⌊log10(2^e)⌋, log10Pow5 ⌊log10(5^e)⌋ (0 ≤ e ≤ 1650).
func log10Pow2(e int32) uint32 { return (uint32(e) * 78913) >> 18 }
func log10Pow5(e int32) uint32 { return (uint32(e) * 732923) >> 20 }

func pow5Factor32(v uint32) uint32 {
	var n uint32
	for v%5 == 0 {
		v /= 5
		n++
	}
	return n
}

func multipleOfPow5(v, p uint32) bool { return pow5Factor32(v) >= p }
func multipleOfPow2(v, p uint32) bool { return v&(1<<p-1) == 0 }

func mulShift32(m uint32, factor uint64, shift int32) uint32 {
	hi, lo := bits.Mul64(uint64(m), factor)
	// (m × factor) >> shift, with shift in [32, 96) and the result < 2^32.
	if shift >= 64 {
		return uint32(hi >> (shift - 64))
	}
	return uint32(lo>>shift | hi<<(64-shift))
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// f2d is Ryū's shortest decimal: f = mant × 10^exp, mant with the fewest
// digits that reads back to f, the closest such to f (ties to even).
// ryuInterval is step 3 of Ryū: the float's halfway interval scaled to a
// power of ten (vm < vr < vp at exponent e10), and what step 4 needs to
// round the shortest digits in it correctly.
type ryuInterval struct {
	vr, vp, vm   uint32
	e10          int32
	vmTZ, vrTZ   bool // vm, vr have trailing decimal zeros removed so far
	lastRemoved  uint32
	acceptBounds bool
}

// f2d is Ryū's float32 to shortest decimal: mant × 10^exp.
func f2d(ieeeMant, ieeeExp uint32) (mant uint32, exp int32) {
	return ryuInterval32(ieeeMant, ieeeExp).shortest()
}

// ryuInterval32 computes the interval of the float (steps 1 to 3).
func ryuInterval32(ieeeMant, ieeeExp uint32) ryuInterval {
	var e2 int32
	var m2 uint32
	if ieeeExp == 0 {
		e2 = 1 - f32Bias - f32MantBits - 2
		m2 = ieeeMant
	} else {
		e2 = int32(ieeeExp) - f32Bias - f32MantBits - 2
		m2 = 1<<f32MantBits | ieeeMant
	}
	acceptBounds := m2&1 == 0
	mv := 4 * m2
	mp := 4*m2 + 2
	mmShift := b2u(ieeeMant != 0 || ieeeExp <= 1)
	mm := 4*m2 - 1 - mmShift

	var vr, vp, vm uint32
	var e10 int32
	vmTrailingZeros, vrTrailingZeros := false, false
	var lastRemoved uint32
	if e2 >= 0 {
		q := log10Pow2(e2)
		e10 = int32(q)
		k := f32Pow5InvBitcnt + pow5bits(int32(q)) - 1
		i := -e2 + int32(q) + k
		vr = mulShift32(mv, f32Pow5InvSplit[q], i)
		vp = mulShift32(mp, f32Pow5InvSplit[q], i)
		vm = mulShift32(mm, f32Pow5InvSplit[q], i)
		if q != 0 && (vp-1)/10 <= vm/10 {
			l := f32Pow5InvBitcnt + pow5bits(int32(q-1)) - 1
			lastRemoved = mulShift32(mv, f32Pow5InvSplit[q-1], -e2+int32(q)-1+l) % 10
		}
		if q <= 9 {
			switch {
			case mv%5 == 0:
				vrTrailingZeros = multipleOfPow5(mv, q)
			case acceptBounds:
				vmTrailingZeros = multipleOfPow5(mm, q)
			default:
				vp -= b2u(multipleOfPow5(mp, q))
			}
		}
	} else {
		q := log10Pow5(-e2)
		e10 = int32(q) + e2
		i := -e2 - int32(q)
		k := pow5bits(i) - f32Pow5Bitcnt
		j := int32(q) - k
		vr = mulShift32(mv, f32Pow5Split[i], j)
		vp = mulShift32(mp, f32Pow5Split[i], j)
		vm = mulShift32(mm, f32Pow5Split[i], j)
		if q != 0 && (vp-1)/10 <= vm/10 {
			j = int32(q) - 1 - (pow5bits(i+1) - f32Pow5Bitcnt)
			lastRemoved = mulShift32(mv, f32Pow5Split[i+1], j) % 10
		}
		if q <= 1 {
			vrTrailingZeros = true
			if acceptBounds {
				vmTrailingZeros = mmShift == 1
			} else {
				vp--
			}
		} else if q < 31 {
			vrTrailingZeros = multipleOfPow2(mv, q-1)
		}
	}
	return ryuInterval{vr: vr, vp: vp, vm: vm, e10: e10, vmTZ: vmTrailingZeros, vrTZ: vrTrailingZeros, lastRemoved: lastRemoved, acceptBounds: acceptBounds}
}

// shortest is step 4: the shortest digits in the interval, correctly
// rounded, and their exponent.
func (iv ryuInterval) shortest() (mant uint32, exp int32) {
	vr, vp, vm, e10 := iv.vr, iv.vp, iv.vm, iv.e10
	vmTrailingZeros, vrTrailingZeros, lastRemoved, acceptBounds := iv.vmTZ, iv.vrTZ, iv.lastRemoved, iv.acceptBounds
	var removed int32
	var out uint32
	if vmTrailingZeros || vrTrailingZeros {
		for vp/10 > vm/10 {
			vmTrailingZeros = vmTrailingZeros && vm%10 == 0
			vrTrailingZeros = vrTrailingZeros && lastRemoved == 0
			lastRemoved = vr % 10
			vr /= 10
			vp /= 10
			vm /= 10
			removed++
		}
		if vmTrailingZeros {
			for vm%10 == 0 {
				vrTrailingZeros = vrTrailingZeros && lastRemoved == 0
				lastRemoved = vr % 10
				vr /= 10
				vp /= 10
				vm /= 10
				removed++
			}
		}
		if vrTrailingZeros && lastRemoved == 5 && vr%2 == 0 {
			lastRemoved = 4 // round to even
		}
		out = vr + b2u((vr == vm && (!acceptBounds || !vmTrailingZeros)) || lastRemoved >= 5)
	} else {
		// The common case (no trailing zeros to track): two digits at a
		// time first, as Ryū's d2s does.
		roundUp := false
		if vp/100 > vm/100 {
			roundUp = vr%100 >= 50
			vr /= 100
			vp /= 100
			vm /= 100
			removed += 2
		}
		for vp/10 > vm/10 {
			roundUp = vr%10 >= 5
			vr /= 10
			vp /= 10
			vm /= 10
			removed++
		}
		if removed == 0 {
			roundUp = lastRemoved >= 5
		}
		return vr + b2u(vr == vm || roundUp), e10 + removed
	}
	return out, e10 + removed
}
