package parquet

import (
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// emptyPageCodec decodes a zero-byte compressed section as zero bytes
// without calling the codec. Writers (arrow-rs among them) leave the values
// section of an all-null data page v2 empty even when the column is
// compressed; zero bytes are not a valid Snappy (or LZ4, or zstd) stream,
// and the format's readers (DuckDB, Arrow C++, arrow-rs) do not decompress
// them. Every other call goes to the wrapped codec.
type emptyPageCodec struct{ compress.Codec }

// streamingEmptyPageCodec keeps the wrapped codec's streaming interface,
// which arrow-go's page reader checks for by type assertion.
type streamingEmptyPageCodec struct {
	emptyPageCodec
	compress.StreamingCodec
}

var (
	_ compress.ErrorCodec     = emptyPageCodec{}
	_ compress.StreamingCodec = streamingEmptyPageCodec{}
)

// init registers the legacy LZ4 codec, then wraps every codec so that an
// empty compressed section reads as an empty page. One init keeps the
// order explicit: the LZ4 codec must be registered before it is wrapped.
func init() {
	compress.RegisterCodec(compress.Codecs.Lz4, hadoopLZ4Codec{})
	for _, c := range []compress.Compression{
		compress.Codecs.Snappy, compress.Codecs.Gzip, compress.Codecs.Brotli,
		compress.Codecs.Zstd, compress.Codecs.Lz4, compress.Codecs.Lz4Raw,
	} {
		codec, err := compress.GetCodec(c)
		if err != nil {
			continue
		}
		w := emptyPageCodec{codec}
		if sc, ok := codec.(compress.StreamingCodec); ok {
			compress.RegisterCodec(c, streamingEmptyPageCodec{w, sc})
		} else {
			compress.RegisterCodec(c, w)
		}
	}
}

// DecodeWithError decodes src into dst, an empty src as an empty page.
func (c emptyPageCodec) DecodeWithError(dst, src []byte) ([]byte, error) {
	if len(src) == 0 {
		return dst[:0], nil
	}
	return compress.Decode(c.Codec, dst, src)
}

// Decode is DecodeWithError for the plain Codec interface.
func (c emptyPageCodec) Decode(dst, src []byte) []byte {
	if len(src) == 0 {
		return dst[:0]
	}
	return c.Codec.Decode(dst, src)
}
