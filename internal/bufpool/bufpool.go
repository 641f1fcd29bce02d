// Package bufpool is an Arrow memory.Allocator that keeps the buffers Arrow
// frees and hands them out again, so a process that reads and writes
// Parquet shard after shard reuses the same warm memory instead of asking
// the Go heap for fresh buffers each time.
//
// Why: arrow-go's GoAllocator ignores Free, so every page, decoded column
// and encoded column of every shard is new garbage; the heap grows to twice
// what is live, and each first touch of a fresh page is a page fault the
// kernel zeroes. On a null-model job (1M rows of 17 columns, 2 cores) those
// faults, the zeroing and the GC they drive were a fifth of the CPU.
//
// Memory stays bounded: a buffer is kept only up to MaxIdle bytes of idle
// buffers in all (Default's); beyond that, freed buffers go back to the garbage
// collector as before. A buffer is reused only after Arrow freed it (its
// last Release), and it is handed out zeroed, as GoAllocator's are.
package bufpool

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

const (
	// minClass is the smallest pooled size (2^12 = 4 KiB): smaller buffers
	// are cheap for the Go allocator and go to it directly. Go allocates a
	// power of two of at least 4 KiB page-aligned, which meets Arrow's
	// 64-byte alignment.
	minShift = 12
	// maxShift is the largest pooled size (2^26 = 64 MiB); larger buffers
	// go to the Go allocator.
	maxShift = 26
	// MaxIdle bounds the bytes of idle buffers Default keeps, in all.
	MaxIdle = 128 << 20
	// maxOutstanding bounds the set of buffers handed out and not yet
	// freed; a buffer never freed (dropped for the GC) stays in it, so
	// past this size the set is forgotten and such buffers are not reused.
	maxOutstanding = 1 << 16
)

// Pool is a memory.Allocator reusing freed buffers by power-of-two size
// class. The zero value is not usable; use New or Default.
type Pool struct {
	mu   sync.Mutex
	free [maxShift + 1][][]byte
	idle int
	// maxIdle bounds idle.
	maxIdle int
	// out maps the first byte's address of each buffer handed out to its
	// class: Free takes back only those, whole, once.
	out      map[uintptr]uint8
	fallback memory.GoAllocator
}

// New returns an empty pool keeping at most maxIdle bytes of freed buffers.
func New(maxIdle int) *Pool { return &Pool{out: make(map[uintptr]uint8), maxIdle: maxIdle} }

// Default is the process's pool, shared by the Parquet source and sink.
var Default = New(MaxIdle)

var _ memory.Allocator = (*Pool)(nil)

// class is the size class of a request, or 0 when it is not pooled.
func class(size int) uint8 {
	if size <= 1<<(minShift-1) || size > 1<<maxShift {
		return 0
	}
	s := bits.Len(uint(size - 1))
	return uint8(max(s, minShift))
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b[:1]))) }

// Allocate returns size zeroed bytes. Its capacity is the size class;
// bytes past size are zeroed when Reallocate hands them out.
func (p *Pool) Allocate(size int) []byte { return p.allocate(size, true) }

// Reallocate resizes b to size, in place when its capacity allows.
func (p *Pool) Reallocate(size int, b []byte) []byte { return p.reallocate(size, b, true) }

// Unzeroed is an allocator over the same buffers that hands a reused one
// out as its last holder left it, without zeroing it: for callers that
// write every byte they later read, such as arrow-go's Parquet page
// buffers and decoded values (its page reader fills what it reads, the
// decoders write every value and build validity bitmaps byte by byte).
// Zeroing warm buffers was 6% of a null-model job's CPU. New buffers are
// zero either way.
func (p *Pool) Unzeroed() memory.Allocator { return unzeroed{p} }

type unzeroed struct{ p *Pool }

func (u unzeroed) Allocate(size int) []byte             { return u.p.allocate(size, false) }
func (u unzeroed) Reallocate(size int, b []byte) []byte { return u.p.reallocate(size, b, false) }
func (u unzeroed) Free(b []byte)                        { u.p.Free(b) }

func (p *Pool) allocate(size int, zero bool) []byte {
	c := class(size)
	if c == 0 {
		return p.fallback.Allocate(size)
	}
	p.mu.Lock()
	var b []byte
	if l := p.free[c]; len(l) > 0 {
		b = l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		p.idle -= len(b)
		p.hold(b, c)
	}
	p.mu.Unlock()
	if b == nil {
		b = make([]byte, 1<<c)
		p.mu.Lock()
		p.hold(b, c)
		p.mu.Unlock()
	} else if zero {
		clear(b[:size])
	}
	return b[:size]
}

// hold records b as handed out; p.mu is held.
func (p *Pool) hold(b []byte, c uint8) {
	if len(p.out) >= maxOutstanding {
		clear(p.out)
	}
	p.out[addr(b)] = c
}

func (p *Pool) reallocate(size int, b []byte, zero bool) []byte {
	if cap(b) >= size {
		if zero && size > len(b) {
			clear(b[len(b):size]) // zeroed, as a new buffer's bytes are
		}
		return b[:size]
	}
	nb := p.allocate(size, zero)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free takes back a buffer this pool handed out; anything else (a smaller
// buffer, a slice of one, a second free) is left to the garbage collector.
func (p *Pool) Free(b []byte) {
	if cap(b) < 1<<minShift {
		return
	}
	b = b[:cap(b)]
	a := addr(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.out[a]
	if !ok || len(b) != 1<<c {
		return
	}
	delete(p.out, a)
	if p.idle+len(b) > p.maxIdle {
		return
	}
	p.free[c] = append(p.free[c], b)
	p.idle += len(b)
}

// Idle is the bytes of freed buffers the pool holds.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}
