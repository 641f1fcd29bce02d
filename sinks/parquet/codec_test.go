package parquet

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
)

// TestSnappyEncodesFast: the registered Snappy codec, which the sink's
// writer compresses pages with, is the standard encoder (not the slower
// "better" search), its blocks decode with the reference decoder and
// through the codec, and corrupt input is an error, not a panic.
func TestSnappyEncodesFast(t *testing.T) {
	codec, err := compress.GetCodec(compress.Codecs.Snappy)
	if err != nil {
		t.Fatal(err)
	}
	// Random 40-bit int64 keys: the better search finds short matches in
	// their zero bytes, the standard one stores the block.
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 8*20_000)
	for i := range 20_000 {
		binary.LittleEndian.PutUint64(src[8*i:], uint64(r.Int64N(1<<40)))
	}
	for name, enc := range map[string]func() []byte{
		"Encode":      func() []byte { return codec.Encode(nil, src) },
		"EncodeLevel": func() []byte { return codec.EncodeLevel(make([]byte, 0, codec.CompressBound(int64(len(src)))), src, 3) },
	} {
		got := enc()
		if want := s2.EncodeSnappy(nil, src); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, not the standard encoder's %d (the better search gives %d)", name, len(got), len(want), len(snappy.Encode(nil, src)))
		}
		if back, err := snappy.Decode(nil, got); err != nil || !bytes.Equal(back, src) {
			t.Errorf("%s: the reference decoder reads it back wrong (%v)", name, err)
		}
		if back, err := compress.Decode(codec, nil, got); err != nil || !bytes.Equal(back, src) {
			t.Errorf("%s: the codec reads it back wrong (%v)", name, err)
		}
	}
	if _, err := compress.Decode(codec, nil, []byte{0xff, 0xff, 0xff, 0x01, 0x00}); err == nil {
		t.Error("a corrupt block decoded without an error")
	}
	if _, ok := codec.(compress.StreamingCodec); !ok {
		t.Error("the codec lost the streaming interface arrow-go's Snappy codec has")
	}
}
