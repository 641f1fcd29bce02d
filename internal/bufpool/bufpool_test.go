package bufpool

import (
	"bytes"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestReuseZeroed: a freed buffer is handed out again for a request of its
// class, zeroed over the bytes asked for, and a grow in place zeroes the
// bytes it adds.
func TestReuseZeroed(t *testing.T) {
	p := New(1 << 20)
	a := p.Allocate(5000)
	if len(a) != 5000 || cap(a) != 8192 {
		t.Fatalf("Allocate(5000): len %d cap %d, want 5000, 8192", len(a), cap(a))
	}
	for i := range a[:cap(a)] {
		a[:cap(a)][i] = 0xff
	}
	p.Free(a)
	if p.Idle() != 8192 {
		t.Fatalf("idle %d after a free, want 8192", p.Idle())
	}
	b := p.Allocate(6000)
	if addr(b) != addr(a) {
		t.Fatal("a freed buffer of the class was not reused")
	}
	if !bytes.Equal(b, make([]byte, 6000)) {
		t.Fatal("a reused buffer is not zeroed over the size asked for")
	}
	b[5999] = 1
	c := p.Reallocate(8000, b)
	if addr(c) != addr(b) || len(c) != 8000 {
		t.Fatalf("Reallocate within the capacity moved or sized wrong (len %d)", len(c))
	}
	if c[5999] != 1 || !bytes.Equal(c[6000:], make([]byte, 2000)) {
		t.Fatal("Reallocate lost data or exposed stale bytes")
	}
	d := p.Reallocate(20000, c)
	if len(d) != 20000 || d[5999] != 1 || p.Idle() != 8192 {
		t.Fatalf("Reallocate past the capacity: len %d, data kept %v, idle %d (want the old buffer freed)", len(d), d[5999] == 1, p.Idle())
	}
}

// TestFreeTakesOnlyItsOwn: a slice of a pooled buffer, a second free, a
// buffer of another allocator and a small buffer never enter the pool, so
// no memory still in use can be handed out twice.
func TestFreeTakesOnlyItsOwn(t *testing.T) {
	p := New(1 << 20)
	a := p.Allocate(8192)
	p.Free(a[4096:]) // a slice whose capacity is a class size
	if p.Idle() != 0 {
		t.Fatal("a slice of a pooled buffer was taken back")
	}
	p.Free(memory.NewGoAllocator().Allocate(8192)[:8192:8192])
	p.Free(make([]byte, 16384))
	small := p.Allocate(100)
	p.Free(small)
	if p.Idle() != 0 {
		t.Fatalf("foreign or small buffers were taken back: idle %d", p.Idle())
	}
	p.Free(a)
	p.Free(a)
	if p.Idle() != 8192 {
		t.Fatalf("idle %d after freeing one buffer twice, want 8192", p.Idle())
	}
	x, y := p.Allocate(8192), p.Allocate(8192)
	if addr(x) == addr(y) {
		t.Fatal("a buffer freed twice was handed out twice")
	}
}

// TestIdleBounded: past its bound, freed buffers are left to the garbage
// collector.
func TestIdleBounded(t *testing.T) {
	const maxIdle = 1 << 20
	p := New(maxIdle)
	var held [][]byte
	for range maxIdle/(1<<16) + 2 {
		held = append(held, p.Allocate(1<<16))
	}
	for _, b := range held {
		p.Free(b)
	}
	if p.Idle() != maxIdle {
		t.Fatalf("idle %d, want the pool filled to its bound %d and no more", p.Idle(), maxIdle)
	}
}

// TestArrowBuffers: memory.Buffer's reserve, resize and release go through
// the pool and give the memory back.
func TestArrowBuffers(t *testing.T) {
	p := New(1 << 20)
	buf := memory.NewResizableBuffer(p)
	buf.Resize(10000)
	buf.Bytes()[9999] = 7
	buf.ResizeNoShrink(30000)
	if buf.Bytes()[9999] != 7 {
		t.Fatal("resize lost data")
	}
	buf.Release()
	if p.Idle() != 16384+32768 {
		t.Fatalf("idle %d after the buffer's release, want both classes back (%d)", p.Idle(), 16384+32768)
	}
}

// TestConcurrentHolders: goroutines allocating, filling, checking and
// freeing buffers of several classes at once never see another holder's
// bytes (run with -race).
func TestConcurrentHolders(t *testing.T) {
	p := New(1 << 20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				b := p.Allocate(4096 << (i % 3))
				for k := range b {
					if b[k] != 0 {
						t.Errorf("goroutine %d: a new buffer holds %d at %d", g, b[k], k)
						return
					}
					b[k] = byte(g + 1)
				}
				for k := range b {
					if b[k] != byte(g+1) {
						t.Errorf("goroutine %d: another holder wrote %d at %d", g, b[k], k)
						return
					}
				}
				p.Free(b)
			}
		})
	}
	wg.Wait()
}

// TestUnzeroedReuses: the unzeroed view takes buffers from the same free
// lists and hands a reused one out as it was left, and the zeroed view still
// zeroes a buffer the unzeroed one gave back.
func TestUnzeroedReuses(t *testing.T) {
	p := New(1 << 20)
	u := p.Unzeroed()
	a := u.Allocate(5000)
	if !bytes.Equal(a, make([]byte, 5000)) {
		t.Fatal("a new buffer is not zero")
	}
	a[0], a[4999] = 1, 2
	u.Free(a)
	b := u.Allocate(5000)
	if addr(b) != addr(a) || b[0] != 1 || b[4999] != 2 {
		t.Fatal("the unzeroed view did not hand the freed buffer back as it was")
	}
	c := u.Reallocate(8000, b)
	if addr(c) != addr(b) || len(c) != 8000 {
		t.Fatal("an unzeroed grow within the capacity moved")
	}
	u.Free(c)
	d := p.Allocate(8192)
	if addr(d) != addr(a) || !bytes.Equal(d, make([]byte, 8192)) {
		t.Fatal("the zeroed view handed out a buffer the unzeroed one left without zeroing it")
	}
}
