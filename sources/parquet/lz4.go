package parquet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/pierrec/lz4/v4"
)

// hadoopLZ4Codec reads Parquet's legacy LZ4 codec (codec 5), which arrow-go
// leaves unimplemented. Two incompatible encodings were written under that
// codec id:
//
//   - Hadoop framing (parquet-mr, older Spark, Arrow C++ since 1.0): one or
//     more frames, each a big-endian uint32 uncompressed size and a
//     big-endian uint32 compressed size followed by one raw LZ4 block;
//   - a bare raw LZ4 block (older Arrow C++ and parquet-cpp).
//
// Decoding tries the Hadoop framing first and falls back to a bare block,
// as parquet-mr and Arrow C++ do: a raw block is vanishingly unlikely to
// parse as a chain of frames whose sizes all match. Encoding writes one
// Hadoop frame, the form every reader of the codec accepts.
//
// It is registered with arrow-go's codec table (compress.RegisterCodec) by
// this package's init (codecs.go), so the reader picks it up for every
// column chunk of codec LZ4.
type hadoopLZ4Codec struct{}

// hadoopFrameHeader is the size of one Hadoop LZ4 frame header.
const hadoopFrameHeader = 8

var _ compress.ErrorCodec = hadoopLZ4Codec{}

// lz4CompressorPool amortizes lz4.Compressor's hash table, which is not
// safe for concurrent use.
var lz4CompressorPool = sync.Pool{New: func() any { return new(lz4.Compressor) }}

// DecodeWithError decodes src into dst, which the page reader sizes to the
// page's uncompressed length. Malformed input is an error, never a panic.
func (hadoopLZ4Codec) DecodeWithError(dst, src []byte) ([]byte, error) {
	if out, ok := decodeHadoopLZ4(dst, src); ok {
		return out, nil
	}
	n, err := lz4.UncompressBlock(src, dst)
	if err != nil {
		return nil, fmt.Errorf("lz4: neither Hadoop-framed nor a raw LZ4 block: %w", err)
	}
	return dst[:n], nil
}

// decodeHadoopLZ4 decodes a chain of Hadoop frames into dst. ok is false
// when src is not exactly such a chain fitting in dst.
func decodeHadoopLZ4(dst, src []byte) (_ []byte, ok bool) {
	out := 0
	for len(src) >= hadoopFrameHeader {
		usize := uint64(binary.BigEndian.Uint32(src[0:4]))
		csize := uint64(binary.BigEndian.Uint32(src[4:8]))
		src = src[hadoopFrameHeader:]
		if csize > uint64(len(src)) || usize > uint64(len(dst)-out) {
			return nil, false
		}
		n, err := lz4.UncompressBlock(src[:csize], dst[out:out+int(usize)])
		if err != nil || uint64(n) != usize {
			return nil, false
		}
		out += n
		src = src[csize:]
	}
	if len(src) != 0 {
		return nil, false
	}
	return dst[:out], true
}

// Decode is DecodeWithError for callers of the plain Codec interface; it
// panics on malformed input, as arrow-go's own codecs do.
func (c hadoopLZ4Codec) Decode(dst, src []byte) []byte {
	out, err := c.DecodeWithError(dst, src)
	if err != nil {
		panic(err)
	}
	return out
}

// Encode writes src as one Hadoop LZ4 frame.
func (c hadoopLZ4Codec) Encode(dst, src []byte) []byte {
	bound := int(c.CompressBound(int64(len(src))))
	if cap(dst) < bound {
		dst = make([]byte, bound)
	}
	dst = dst[:bound]
	comp := lz4CompressorPool.Get().(*lz4.Compressor)
	defer lz4CompressorPool.Put(comp)
	n, err := comp.CompressBlock(src, dst[hadoopFrameHeader:])
	if err != nil {
		panic(fmt.Errorf("lz4: compressing a page: %w", err))
	}
	if n == 0 && len(src) > 0 {
		// CompressBlock reports incompressible input with 0 only when
		// dst is shorter than the bound, which it is not here.
		panic(errors.New("lz4: compressing a page: no output"))
	}
	binary.BigEndian.PutUint32(dst[0:4], uint32(len(src)))
	binary.BigEndian.PutUint32(dst[4:8], uint32(n))
	return dst[:hadoopFrameHeader+n]
}

// EncodeLevel is Encode: the LZ4 block format has no levels.
func (c hadoopLZ4Codec) EncodeLevel(dst, src []byte, _ int) []byte { return c.Encode(dst, src) }

// CompressBound is the largest Encode output for n input bytes.
func (hadoopLZ4Codec) CompressBound(n int64) int64 {
	return hadoopFrameHeader + int64(lz4.CompressBlockBound(int(n)))
}
