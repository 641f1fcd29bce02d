package sinktest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/sinks"
)

// PoisonAllocator overwrites a buffer when its last reference is released,
// so that a writer reading a batch it no longer holds reads garbage, not
// the old bytes by luck. Wrap it in memory.NewCheckedAllocator to also
// find references never released.
type PoisonAllocator struct{}

// Allocate returns a zeroed buffer.
func (PoisonAllocator) Allocate(size int) []byte { return make([]byte, size) }

// Reallocate copies b into a new buffer and poisons b.
func (PoisonAllocator) Reallocate(size int, b []byte) []byte {
	nb := make([]byte, size)
	copy(nb, b)
	PoisonAllocator{}.Free(b)
	return nb
}

// Free poisons b: 0xFF bytes read as NaN floats and -1 integers.
func (PoisonAllocator) Free(b []byte) {
	for i := range b {
		b[i] = 0xFF
	}
}

// testBatchReferences checks ShardWriter.Write's contract on batch
// references: the caller releases its batch as soon as Write returns; a
// writer still reading it (encoding on other goroutines) must hold a
// reference of its own and drop it by Commit or Abort. Batches are large
// (600 rows) so that writers that encode whole pipelines concurrently do
// so here. Freed buffers are poisoned, so a writer reading a batch it does
// not hold writes wrong rows; a checked allocator finds a reference kept
// past Commit or Abort.
func testBatchReferences(t *testing.T, h Harness, s sinks.Sink) {
	ctx := ctxT(t)
	run := NewRun("v1", false, params())
	prepare(t, s, run)
	mem := memory.NewCheckedAllocator(PoisonAllocator{})
	write := func(index, from, to int) sinks.ShardWriter {
		w, err := s.Shard(ctx, run, index)
		if err != nil {
			t.Fatalf("%s: Shard(%d): %v", s.Name(), index, err)
		}
		for lo := from; lo < to; lo += 600 {
			b := batchWith(mem, run, lo, min(lo+600, to), 0)
			err := w.Write(ctx, b)
			b.Release()
			if err != nil {
				t.Fatalf("%s: shard %d Write rows [%d,%d): %v", s.Name(), index, lo, min(lo+600, to), err)
			}
		}
		return w
	}
	// An aborted attempt first: its references must go with it.
	if err := write(0, 0, 1800).Abort(ctx); err != nil {
		t.Fatalf("%s: Abort: %v", s.Name(), err)
	}
	if n := mem.CurrentAlloc(); n != 0 {
		t.Fatalf("%s: %d bytes of batches still referenced after Abort", s.Name(), n)
	}
	for i, r := range [][2]int{{0, 1800}, {1800, 3000}} {
		if err := write(i, r[0], r[1]).Commit(ctx); err != nil {
			t.Fatalf("%s: shard %d Commit: %v", s.Name(), i, err)
		}
		ledgerOf(s).commit(run, i, int64(r[1]-r[0]))
		if n := mem.CurrentAlloc(); n != 0 {
			t.Fatalf("%s: %d bytes of shard %d's batches still referenced after Commit", s.Name(), n, i)
		}
	}
	publish(t, s, run)
	expect(t, h, s, run, "v1", Want(run, 0, 3000))
}
