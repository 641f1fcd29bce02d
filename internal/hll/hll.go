// Package hll is a HyperLogLog sketch of a shard's keys. Sketches are stored
// with each committed shard in the ledger and merged at publish to estimate
// how many keys appear in more than one shard, for stores that cannot tell
// exactly (Parquet, Redis). The hash is fixed (xxh3), so sketches made by
// different processes and versions merge.
package hll

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/zeebo/xxh3"
)

// Precision is log2 of the register count: 2^13 registers of one byte,
// a relative standard error of 1.04/sqrt(8192) ≈ 1.15%.
const Precision = 13

const m = 1 << Precision

// Sketch counts distinct keys approximately and all keys exactly.
type Sketch struct {
	reg [m]uint8
	// n is the number of keys added (duplicates included).
	n uint64
}

// New returns an empty sketch.
func New() *Sketch { return &Sketch{} }

// AddString adds a text key.
func (s *Sketch) AddString(k string) { s.addHash(xxh3.HashString(k)) }

// AddInt adds an integer key: the xxh3 hash of its 8 little-endian bytes.
func (s *Sketch) AddInt(k int64) { s.addHash(hashInt(k)) }

// hashInt is xxh3.Hash of k's 8 little-endian bytes, computed inline: the
// generic byte-slice hash was 5% of a null-model job's CPU, every row's key
// going through its length dispatch. It is xxh3's 4-8 byte path with both
// 4-byte reads known (TestHashIntIsXXH3 pins it to the library).
func hashInt(k int64) uint64 {
	const (
		key64_008 = 0x1cad21f72c81017c
		key64_016 = 0xdb979083e96dd4de
	)
	// input2 + input1<<32: the high word then the low word.
	h := bits.RotateLeft64(uint64(k), 32) ^ (key64_008 ^ key64_016)
	// rrmxmx with length 8.
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= 0x9fb21c651e98df25
	h ^= (h >> 35) + 8
	h *= 0x9fb21c651e98df25
	h ^= h >> 28
	return h
}

func (s *Sketch) addHash(h uint64) {
	s.n++
	idx := h >> (64 - Precision)
	rank := uint8(bits.LeadingZeros64(h<<Precision|1<<(Precision-1)) + 1)
	if rank > s.reg[idx] {
		s.reg[idx] = rank
	}
}

// Merge adds o's keys to s.
func (s *Sketch) Merge(o *Sketch) {
	s.n += o.n
	for i, r := range o.reg {
		if r > s.reg[i] {
			s.reg[i] = r
		}
	}
}

// Count is the number of keys added, duplicates included.
func (s *Sketch) Count() uint64 { return s.n }

// Distinct estimates the number of distinct keys added.
func (s *Sketch) Distinct() float64 {
	sum, zeros := 0.0, 0
	for _, r := range s.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	alpha := 0.7213 / (1 + 1.079/float64(m))
	est := alpha * m * m / sum
	if est <= 2.5*m && zeros > 0 {
		est = m * math.Log(float64(m)/float64(zeros)) // linear counting
	}
	return min(est, float64(s.n))
}

// Duplicates estimates how many added keys repeat an earlier one, and how
// many of them it takes to be sure (5 standard errors) that some do.
func (s *Sketch) Duplicates() (estimate, threshold float64) {
	d := s.Distinct()
	stderr := 1.04 / math.Sqrt(m) * d
	if t := d / m; d <= 2.5*m {
		stderr = math.Sqrt(m * (math.Exp(t) - t - 1)) // linear counting
	}
	return float64(s.n) - d, max(5*stderr, 0.5)
}

// Encode is the sketch as text (for the ledger): base64 of n and registers.
func (s *Sketch) Encode() string {
	b := make([]byte, 8+m)
	for i := range 8 {
		b[i] = byte(s.n >> (8 * i))
	}
	copy(b[8:], s.reg[:])
	return base64.StdEncoding.EncodeToString(b)
}

// Decode parses Encode's output, validating it (ledger rows may come from
// another version).
func Decode(text string) (*Sketch, error) {
	b, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("key sketch: %w", err)
	}
	if len(b) != 8+m {
		return nil, fmt.Errorf("key sketch: %d bytes, want %d (precision %d)", len(b), 8+m, Precision)
	}
	s := &Sketch{}
	for i := range 8 {
		s.n |= uint64(b[i]) << (8 * i)
	}
	copy(s.reg[:], b[8:])
	for _, r := range s.reg {
		if r > 64-Precision+1 {
			return nil, errors.New("key sketch: register out of range")
		}
	}
	return s, nil
}
