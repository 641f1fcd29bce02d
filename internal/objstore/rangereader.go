package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
)

// Range is a byte range of an object: Len bytes from Off.
type Range struct{ Off, Len int64 }

func (r Range) end() int64 { return r.Off + r.Len }

// Ranged-read geometry. A reader fetches the ranges it was told it will
// read (Plan) in blocks of blockSize, keeping up to aheadBlocks blocks of
// each range fetched ahead of the reads, at most inFlight GETs at once and
// at most maxBlocks blocks in memory (blockSize*maxBlocks bounds a reader).
const (
	blockSize   = 4 << 20
	aheadBlocks = 2
	inFlight    = 8
	maxBlocks   = 24
	// CoalesceGap is the largest hole between two planned ranges that is
	// read rather than skipped: one GET for two column chunks separated by
	// a small unprojected one costs less than two. A hole is read only
	// when it is at most 1/coalesceRatio of the bytes around it, so that
	// coalescing adds at most about 6% to the bytes fetched.
	CoalesceGap   = 32 << 10
	coalesceRatio = 16
	// TailSize is fetched at open: the footer (arrow-go reads the last 64
	// KiB first) and the footer length.
	TailSize = 64 << 10
)

var (
	fetchedBytes atomic.Int64
	readBytes    = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "precog_objstore_read_bytes_total",
		Help: "Bytes fetched from object storage by ranged reads (Parquet footers and column chunks).",
	})
)

func init() { prometheus.MustRegister(readBytes) }

// FetchedBytes is the total of bytes this process fetched by ranged reads,
// for the bench's bytes-fetched-against-bytes-needed ratio.
func FetchedBytes() int64 { return fetchedBytes.Load() }

func countFetched(n int) {
	fetchedBytes.Add(int64(n))
	readBytes.Add(float64(n))
}

// RangeReader reads one object by ranged GETs as an io.ReaderAt and
// io.Seeker (what a Parquet reader takes). Reads outside the planned
// ranges are served by a GET of exactly the bytes asked for. It is safe
// for concurrent ReadAt calls.
type RangeReader struct {
	b    *Bucket
	key  string
	size int64
	ctx  context.Context

	tail    []byte // the object's last bytes, fetched at open
	tailOff int64

	sem chan struct{}

	mu     sync.Mutex
	spans  []Range // planned, coalesced, sorted
	blocks map[int64]*block
	tick   int64
	pos    int64 // Seek's position
}

type block struct {
	off  int64
	data []byte
	done chan struct{}
	err  error
	used int64 // tick of the last read, for eviction
	seen int64 // bytes served; a block served whole is dropped
}

// OpenRange opens key for ranged reads under ctx (its reads stop when ctx
// is cancelled) and fetches the object's last TailSize bytes. With known
// attributes (a plan's), the tail is read at once and the object's
// attributes come from that read's answer, saving a metadata round trip
// on S3; the caller compares them with what it planned.
func (b *Bucket) OpenRange(ctx context.Context, key string, known *Attrs) (*RangeReader, Attrs, error) {
	if known == nil || known.Size <= 0 || b.loc.Scheme != "s3" {
		a, err := b.Attributes(ctx, key)
		if err != nil {
			return nil, Attrs{}, err
		}
		known = &a
	}
	r := &RangeReader{b: b, key: key, size: known.Size, ctx: ctx, sem: make(chan struct{}, inFlight), blocks: map[int64]*block{}}
	n := min(known.Size, TailSize)
	r.tail, r.tailOff = make([]byte, n), known.Size-n
	if n == 0 {
		return r, *known, nil
	}
	a, err := b.readTail(ctx, key, r.tailOff, r.tail)
	if err != nil {
		return nil, Attrs{}, err
	}
	countFetched(int(n))
	if a.Size != known.Size {
		// Rewritten since known was taken: report what is there now.
		return r, a, nil
	}
	if a.ETag == "" {
		a.ETag = known.ETag
	}
	return r, a, nil
}

// readTail reads dst from off and returns the object's attributes as the
// read's answer gives them (size, modification time, and on S3 the ETag).
func (b *Bucket) readTail(ctx context.Context, key string, off int64, dst []byte) (Attrs, error) {
	var a Attrs
	var err error
	for attempt := range maxAttempts {
		if attempt > 0 {
			if werr := sleep(ctx, attempt); werr != nil {
				return Attrs{}, errors.Join(err, werr)
			}
		}
		if a, err = b.readTailOnce(ctx, key, off, dst); err == nil || NotFound(err) || ctx.Err() != nil {
			return a, err
		}
	}
	return Attrs{}, err
}

func (b *Bucket) readTailOnce(ctx context.Context, key string, off int64, dst []byte) (Attrs, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	r, err := b.b.NewRangeReader(ctx, key, off, int64(len(dst)), nil)
	if err != nil {
		return Attrs{}, fmt.Errorf("%s: reading bytes %d..%d: %w", b.loc.ObjectURL(key), off, off+int64(len(dst)), err)
	}
	defer r.Close()
	a := Attrs{Size: r.Size(), ModTime: r.ModTime()}
	var out s3.GetObjectOutput
	if r.As(&out) && out.ETag != nil {
		a.ETag = *out.ETag
	}
	if _, err := io.ReadFull(r, dst); err != nil {
		return Attrs{}, fmt.Errorf("%s: reading bytes %d..%d: %w", b.loc.ObjectURL(key), off, off+int64(len(dst)), err)
	}
	return a, nil
}

// Size is the object's size.
func (r *RangeReader) Size() int64 { return r.size }

// Plan tells the reader which ranges will be read, coalesced across holes
// of at most CoalesceGap bytes, and starts fetching the first block of
// each, so that several GETs are in flight from the start.
func (r *RangeReader) Plan(ranges []Range) {
	spans := Coalesce(ranges, CoalesceGap)
	r.mu.Lock()
	r.spans = spans
	for _, s := range spans {
		if len(r.blocks) >= maxBlocks/2 {
			break
		}
		r.startLocked(s, s.Off)
	}
	r.mu.Unlock()
}

// Coalesce sorts ranges and merges those that overlap or lie at most gap
// bytes apart, when the hole is at most 1/coalesceRatio of the merged
// bytes. Empty ranges are dropped.
func Coalesce(ranges []Range, gap int64) []Range {
	var rs []Range
	for _, x := range ranges {
		if x.Len > 0 {
			rs = append(rs, x)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Off < rs[j].Off })
	var out []Range
	for _, x := range rs {
		if n := len(out); n > 0 && x.Off <= out[n-1].end()+gap && (x.Off-out[n-1].end())*coalesceRatio <= x.end()-out[n-1].Off {
			if e := x.end(); e > out[n-1].end() {
				out[n-1].Len = e - out[n-1].Off
			}
			continue
		}
		out = append(out, x)
	}
	return out
}

// spanOf returns the planned span holding off.
func (r *RangeReader) spanOf(off int64) (Range, bool) {
	i := sort.Search(len(r.spans), func(i int) bool { return r.spans[i].end() > off })
	if i < len(r.spans) && r.spans[i].Off <= off {
		return r.spans[i], true
	}
	return Range{}, false
}

// blockStart is the start of the block of span s holding off.
func blockStart(s Range, off int64) int64 { return s.Off + (off-s.Off)/blockSize*blockSize }

// startLocked starts fetching the block of s at off unless it is there.
func (r *RangeReader) startLocked(s Range, off int64) *block {
	if bl, ok := r.blocks[off]; ok {
		return bl
	}
	if len(r.blocks) >= maxBlocks {
		r.evictLocked()
	}
	n := min(int64(blockSize), s.end()-off)
	r.tick++
	bl := &block{off: off, data: make([]byte, n), done: make(chan struct{}), used: r.tick}
	r.blocks[off] = bl
	go func() {
		defer close(bl.done)
		select {
		case r.sem <- struct{}{}:
		case <-r.ctx.Done():
			bl.err = r.ctx.Err()
			return
		}
		defer func() { <-r.sem }()
		bl.err = r.b.ReadRange(r.ctx, r.key, off, bl.data)
		if bl.err == nil {
			countFetched(len(bl.data))
		}
	}()
	return bl
}

// evictLocked drops the least recently used fetched block.
func (r *RangeReader) evictLocked() {
	var victim *block
	for _, bl := range r.blocks {
		select {
		case <-bl.done:
		default:
			continue
		}
		if victim == nil || bl.used < victim.used {
			victim = bl
		}
	}
	if victim != nil {
		delete(r.blocks, victim.off)
	}
}

// ReadAt implements io.ReaderAt.
func (r *RangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset %d", r.b.loc.ObjectURL(r.key), off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := p
	if rest := r.size - off; int64(len(want)) > rest {
		want = want[:rest]
	}
	n := 0
	for n < len(want) {
		m, err := r.readSome(want[n:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readSome serves a prefix of p from the tail, a planned block, or a GET
// of its own.
func (r *RangeReader) readSome(p []byte, off int64) (int, error) {
	if off >= r.tailOff && off-r.tailOff < int64(len(r.tail)) {
		return copy(p, r.tail[off-r.tailOff:]), nil
	}
	r.mu.Lock()
	s, planned := r.spanOf(off)
	if !planned {
		r.mu.Unlock()
		n := len(p)
		if off < r.tailOff {
			n = int(min(int64(n), r.tailOff-off))
		}
		if err := r.b.ReadRange(r.ctx, r.key, off, p[:n]); err != nil {
			return 0, err
		}
		countFetched(n)
		return n, nil
	}
	start := blockStart(s, off)
	bl := r.startLocked(s, start)
	r.tick++
	bl.used = r.tick
	for k := 1; k <= aheadBlocks; k++ {
		next := start + int64(k)*blockSize
		if next >= s.end() || len(r.blocks) >= maxBlocks {
			break
		}
		r.startLocked(s, next)
	}
	r.mu.Unlock()

	select {
	case <-bl.done:
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	}
	if bl.err != nil {
		r.mu.Lock()
		if r.blocks[bl.off] == bl {
			delete(r.blocks, bl.off) // a later read tries again
		}
		r.mu.Unlock()
		return 0, bl.err
	}
	n := copy(p, bl.data[off-bl.off:])
	r.mu.Lock()
	bl.seen += int64(n)
	if bl.seen >= int64(len(bl.data)) && r.blocks[bl.off] == bl {
		delete(r.blocks, bl.off) // read through: sequential readers do not come back
	}
	r.mu.Unlock()
	return n, nil
}

// Seek implements io.Seeker (Parquet readers find the size with it).
func (r *RangeReader) Seek(offset int64, whence int) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.size
	default:
		return 0, errors.New("seek: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("seek: negative position")
	}
	r.pos = offset
	return offset, nil
}

// Read implements io.Reader from Seek's position.
func (r *RangeReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	pos := r.pos
	r.mu.Unlock()
	n, err := r.ReadAt(p, pos)
	r.mu.Lock()
	r.pos += int64(n)
	r.mu.Unlock()
	return n, err
}

// Close drops the fetched blocks; fetches in flight end with the reader's
// context.
func (r *RangeReader) Close() error {
	r.mu.Lock()
	clear(r.blocks)
	r.spans = nil
	r.mu.Unlock()
	return nil
}
