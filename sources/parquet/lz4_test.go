package parquet

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/pierrec/lz4/v4"

	"github.com/precog-ml/precog/sources"
)

// lz4Page is compressible page-like data: runs of repeated bytes and a
// counter, n bytes long.
func lz4Page(n, seed int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte((i/37 + seed) % 251)
	}
	return out
}

func rawLZ4Block(t *testing.T, src []byte) []byte {
	t.Helper()
	dst := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := lz4.CompressBlock(src, dst, nil)
	if err != nil || n == 0 {
		t.Fatalf("lz4 compress: n=%d err=%v", n, err)
	}
	return dst[:n]
}

func hadoopFrame(t *testing.T, src []byte) []byte {
	t.Helper()
	block := rawLZ4Block(t, src)
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr[0:4], uint32(len(src)))
	binary.BigEndian.PutUint32(hdr[4:8], uint32(len(block)))
	return append(hdr, block...)
}

// TestHadoopLZ4Codec pins the legacy LZ4 codec's decoding: one Hadoop
// frame, several frames (parquet-mr splits large pages), a bare raw block
// (older Arrow C++), and garbage as an error rather than a panic.
func TestHadoopLZ4Codec(t *testing.T) {
	codec, err := compress.GetCodec(compress.Codecs.Lz4)
	if err != nil {
		t.Fatalf("LZ4 codec not registered: %v", err)
	}
	a, b := lz4Page(5000, 1), lz4Page(3000, 2)
	whole := append(append([]byte(nil), a...), b...)
	cases := []struct {
		name string
		src  []byte
		want []byte
	}{
		{"one hadoop frame", hadoopFrame(t, a), a},
		{"two hadoop frames", append(hadoopFrame(t, a), hadoopFrame(t, b)...), whole},
		{"raw block", rawLZ4Block(t, whole), whole},
		{"empty page", nil, []byte{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]byte, len(c.want))
			got, err := compress.Decode(codec, dst, c.src)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, c.want) {
				t.Fatalf("decoded %d bytes, want %d (equal prefix: %v)", len(got), len(c.want), bytes.HasPrefix(c.want, got))
			}
		})
	}

	// A Hadoop frame claiming more output than the page has falls back to
	// the raw decoder, which rejects it: an error, not a panic.
	bad := hadoopFrame(t, a)
	if _, err := compress.Decode(codec, make([]byte, 100), bad); err == nil {
		t.Fatal("frame larger than the page decoded without error")
	}
	if _, err := compress.Decode(codec, make([]byte, 100), []byte{0xff, 0xff, 0xff, 0xff, 0xff}); err == nil {
		t.Fatal("garbage decoded without error")
	}

	// Encode writes one Hadoop frame that decodes back.
	enc := codec.Encode(nil, whole)
	if usize := binary.BigEndian.Uint32(enc[0:4]); int(usize) != len(whole) {
		t.Fatalf("encoded frame says %d bytes uncompressed, want %d", usize, len(whole))
	}
	if csize := binary.BigEndian.Uint32(enc[4:8]); int(csize) != len(enc)-8 {
		t.Fatalf("encoded frame says %d bytes compressed, has %d", csize, len(enc)-8)
	}
	got, err := compress.Decode(codec, make([]byte, len(whole)), enc)
	if err != nil || !bytes.Equal(got, whole) {
		t.Fatalf("round trip: err=%v equal=%v", err, bytes.Equal(got, whole))
	}
}

// TestReadsLZ4Files reads files written with the legacy LZ4 codec (Hadoop
// framing, the registered encoder), page v1 and v2, dictionary and plain.
func TestReadsLZ4Files(t *testing.T) {
	dir := t.TempDir()
	for _, v2 := range []bool{false, true} {
		for _, dict := range []bool{false, true} {
			name := "lz4"
			props := []pq.WriterProperty{pq.WithCompression(compress.Codecs.Lz4), pq.WithDictionaryDefault(dict), pq.WithDataPageSize(2048)}
			if v2 {
				name += "-v2"
				props = append(props, pq.WithDataPageVersion(pq.DataPageV2))
			}
			if dict {
				name += "-dict"
			}
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(dir, name+".parquet")
				writeArrowFile(t, path, 0, 3000, 1000, props...)
				s := mustNew(t, path)
				recs := readShards(t, s, mustPlan(t, s, 700), sources.ReadOptions{Columns: []string{"id", "name"}, BatchSize: 500})
				defer releaseAll(recs)
				ids := int64Column(t, recs, "id")
				if len(ids) != 3000 {
					t.Fatalf("read %d rows, want 3000", len(ids))
				}
				for i, id := range ids {
					if id != int64(i) {
						t.Fatalf("row %d: id %d", i, id)
					}
				}
			})
		}
	}
}
