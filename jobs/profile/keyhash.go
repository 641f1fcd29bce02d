package profile

import (
	"encoding/binary"
	"math/bits"
	"strconv"

	"github.com/zeebo/xxh3"
)

// A sampled key's hash is xxh3 of its text, so an integer key and the same
// key stored as a string hash alike. hashInt is that hash for an int64 key
// without strconv: keys below 10^8 (most integer ids) get their eight
// decimal digits from a few multiplies on one word (SWAR), the rest go
// through strconv.AppendInt. It runs once per output row of a checked run.

// hashInt is xxh3.HashString(strconv.FormatInt(v, 10)).
func hashInt(v int64) uint64 {
	if v <= 0 || v >= 1e8 {
		var buf [20]byte
		return xxh3.Hash(strconv.AppendInt(buf[:0], v, 10))
	}
	var buf [8]byte
	z := digits8(uint64(v))
	binary.LittleEndian.PutUint64(buf[:], z+0x3030303030303030)
	text := buf[bits.TrailingZeros64(z)/8:]
	if len(text) < 4 {
		return xxh3.Hash(text)
	}
	return xxh3Len4To8(text)
}

// xxh3Len4To8 is XXH3-64 (seed 0, default secret) of 4 to 8 bytes, the
// length of most integer keys' text, inlined: the general entry point's
// dispatch costs more than this branch's arithmetic.
// TestHashIntMatchesText holds it equal to xxh3.Hash.
func xxh3Len4To8(p []byte) uint64 {
	const (
		secret8  = 0x1cad21f72c81017c // the default secret's bytes 8–15
		secret16 = 0xdb979083e96dd4de // and 16–23, little endian
		prime    = 0x9fb21c651e98df25
	)
	n := uint64(len(p))
	in1 := uint64(binary.LittleEndian.Uint32(p))
	in2 := uint64(binary.LittleEndian.Uint32(p[len(p)-4:]))
	h := (in2 + in1<<32) ^ (secret8 ^ secret16)
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= prime
	h ^= h>>35 + n
	h *= prime
	return h ^ h>>28
}

// digits8 is the eight decimal digits of 0 < v < 10^8 as bytes 0–9, most
// significant first in memory (the word's lowest byte).
func digits8(v uint64) uint64 {
	x := v/10000 | (v%10000)<<32               // two 4-digit lanes
	q := (x * 5243 >> 19) & 0x0000007F0000007F // lane / 100
	y := q | (x-q*100)<<16                     // four 2-digit lanes
	t := (y * 103 >> 10) & 0x000F000F000F000F  // lane / 10
	return t | (y-t*10)<<8                     // eight digits
}
