package redis

import "sync"

// batchPool recycles pipeline batches (*pipeBatch) across shard attempts:
// a batch's arena grows to a whole pipeline of records (MBs for wide ones),
// which a fresh attempt would otherwise grow again by doubling, copying and
// clearing as it goes. A bounded free list holds as many batches as one
// attempt can use, so the next attempt finds them whatever the GC or the
// scheduler did meanwhile (a sync.Pool alone may drop them, and does so at
// random under the race detector); the rest go to a sync.Pool.
type batchPool struct {
	free chan *pipeBatch
	pool sync.Pool
}

func newBatchPool(n int) *batchPool { return &batchPool{free: make(chan *pipeBatch, n)} }

// get returns a recycled batch, reset, or nil.
func (p *batchPool) get() *pipeBatch {
	select {
	case b := <-p.free:
		b.reset()
		return b
	default:
	}
	if b, ok := p.pool.Get().(*pipeBatch); ok {
		b.reset()
		return b
	}
	return nil
}

// put keeps b for a later attempt.
func (p *batchPool) put(b *pipeBatch) {
	select {
	case p.free <- b:
	default:
		p.pool.Put(b)
	}
}
