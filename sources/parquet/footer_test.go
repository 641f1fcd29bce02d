package parquet

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/precog-ml/precog/sources"
	"github.com/precog-ml/precog/sources/parquet/parquettest"
)

// captureLogs sends the default slog logger to a buffer for the test.
func captureLogs(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

// TestUnknownLogicalTypeReadByPhysicalType: a column annotated with a
// logical type newer than the reader (union member 99) is read by its
// physical type, with one warning naming the file and the column, however
// many shards open the file.
func TestUnknownLogicalTypeReadByPhysicalType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "newer.parquet")
	writeArrowFile(t, path, 0, 3000, 1000, pq.WithDictionaryDefault(false))
	if err := parquettest.SetUnknownLogicalType(path, "id", 99); err != nil {
		t.Fatal(err)
	}
	logs := captureLogs(t)
	s := mustNew(t, path)
	sc, err := s.Schema(context.Background())
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	if f, _ := sc.FieldsByName("id"); len(f) != 1 || f[0].Type.String() != "int64" {
		t.Fatalf("id read as %v, want its physical type int64", f)
	}
	recs := readShards(t, s, mustPlan(t, s, 700), sources.ReadOptions{Columns: []string{"id", "score"}})
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
	var row int
	for _, rec := range recs {
		score := rec.Column(1).(*array.Float32)
		for i := range score.Len() {
			if want := float32(row) * 1.5; row%4 != 1 && score.Value(i) != want {
				t.Fatalf("row %d: score %v, want %v", row, score.Value(i), want)
			}
			row++
		}
	}
	warn := fmt.Sprintf(`level=WARN msg="parquet column has a logical type this reader does not know; reading it by its physical type" file=%s column=id`, path)
	if n := strings.Count(logs.String(), warn); n != 1 {
		t.Fatalf("want the warning once, got %d times in:\n%s", n, logs)
	}
}

// TestZeroFileRowCount: old writers left the footer's row count at 0; the
// row groups are read (and split shards seek within them).
func TestZeroFileRowCount(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.parquet")
	writeArrowFile(t, path, 0, 3000, 1000)
	if err := parquettest.SetNumRows(path, 0); err != nil {
		t.Fatal(err)
	}
	logs := captureLogs(t)
	s := mustNew(t, path)
	recs := readShards(t, s, mustPlan(t, s, 700), sources.ReadOptions{Columns: []string{"id"}})
	defer releaseAll(recs)
	ids := int64Column(t, recs, "id")
	for i, id := range ids {
		if id != int64(i) {
			t.Fatalf("row %d: id %d", i, id)
		}
	}
	if len(ids) != 3000 {
		t.Fatalf("read %d rows, want 3000", len(ids))
	}
	if !strings.Contains(logs.String(), "parquet file says it holds 0 rows") {
		t.Errorf("no warning about the row count:\n%s", logs)
	}

	// Any other disagreement is still a corrupt footer.
	if err := parquettest.SetNumRows(path, 5); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("parquet file %s: corrupt footer: row groups hold 3000 rows but the file says 5", path)
	if _, err := s.Plan(context.Background(), 700); err == nil || err.Error() != want {
		t.Fatalf("plan: %v, want %s", err, want)
	}
}

// TestUnsupportedCodecRefusedAtPlan: a column chunk in a codec the reader
// cannot decode fails Schema and Plan (so validate and run exit 2 before
// anything runs), naming the file, the column and the codec.
func TestUnsupportedCodecRefusedAtPlan(t *testing.T) {
	for _, c := range []struct {
		codec int32
		name  string
	}{{parquettest.CodecLZO, "LZO"}, {42, "an unknown codec"}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lzo.parquet")
			writeArrowFile(t, path, 0, 2000, 1000, pq.WithCompression(compress.Codecs.Uncompressed))
			if err := parquettest.SetCodec(path, "score", c.codec); err != nil {
				t.Fatal(err)
			}
			if err := parquettest.SetCodec(path, "hist.list.element", c.codec); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf(`parquet file %s: unsupported compression: column "score" is compressed with %s (codec %d), column "hist.list.element" is compressed with %s (codec %d); `+
				`this reader decodes UNCOMPRESSED, SNAPPY, GZIP, BROTLI, ZSTD, LZ4 and LZ4_RAW: rewrite the file with one of them`, path, c.name, c.codec, c.name, c.codec)
			s := mustNew(t, path)
			if _, err := s.Schema(context.Background()); err == nil || err.Error() != want {
				t.Fatalf("schema: %v\nwant %s", err, want)
			}
			if _, err := s.Plan(context.Background(), 500); err == nil || err.Error() != want {
				t.Fatalf("plan: %v\nwant %s", err, want)
			}
		})
	}
}

// TestEmptyCompressedPageSection: an empty compressed section decodes to
// an empty page in every codec (zero bytes are not a valid Snappy, LZ4 or
// zstd stream; arrow-rs writes them for all-null v2 pages).
func TestEmptyCompressedPageSection(t *testing.T) {
	for _, c := range []compress.Compression{compress.Codecs.Snappy, compress.Codecs.Zstd, compress.Codecs.Lz4Raw, compress.Codecs.Lz4, compress.Codecs.Gzip, compress.Codecs.Brotli} {
		codec, err := compress.GetCodec(c)
		if err != nil {
			t.Fatal(err)
		}
		out, err := compress.Decode(codec, make([]byte, 0, 16), nil)
		if err != nil || len(out) != 0 {
			t.Errorf("%s: empty section gave %d bytes, %v", c, len(out), err)
		}
		// Non-empty input still goes to the codec.
		enc := codec.Encode(nil, []byte("hello, parquet"))
		dec, err := compress.Decode(codec, make([]byte, 14), enc)
		if err != nil || string(dec) != "hello, parquet" {
			t.Errorf("%s: round trip gave %q, %v", c, dec, err)
		}
	}
}

// TestColumnChunkOutsideFile: a column chunk whose footer byte range lies
// outside the file is a corrupt footer at plan time, for a top-level column
// and for the child of a struct (where arrow-go would panic on a goroutine
// of its own, beyond recovery).
func TestColumnChunkOutsideFile(t *testing.T) {
	dir := t.TempDir()
	flat := filepath.Join(dir, "flat.parquet")
	writeArrowFile(t, flat, 0, 100, 100)
	data, err := os.ReadFile(filepath.Join(corpusDir, "data", "repeated_no_annotation.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(dir, "nested.parquet")
	if err := os.WriteFile(nested, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, column string
		size         int64
		want         string
	}{
		{flat, "score", -84, `row group 0, column "score": corrupt footer: column chunk at offset %d, -84 bytes, outside the file`},
		{nested, "phoneNumbers.phone.number", -84, `row group 0, column "phoneNumbers.phone.number": corrupt footer: column chunk at offset %d, -84 bytes, outside the file`},
		{nested, "id", 1 << 40, `row group 0, column "id": corrupt footer: column chunk at offset %d, 1099511627776 bytes, outside the file`},
	} {
		if err := parquettest.SetCompressedSize(c.path, c.column, c.size); err != nil {
			t.Fatal(err)
		}
		s := mustNew(t, c.path)
		_, err := s.Plan(context.Background(), 3)
		if err == nil || !strings.HasPrefix(err.Error(), "parquet file "+c.path+": row group 0, column ") ||
			!strings.Contains(err.Error(), strings.SplitN(c.want, "%d", 2)[0]) || !strings.Contains(err.Error(), "outside the file") {
			t.Fatalf("%s %s: plan error %v, want %s", filepath.Base(c.path), c.column, err, c.want)
		}
		if err := parquettest.SetCompressedSize(c.path, c.column, 10); err != nil {
			t.Fatal(err)
		}
	}
}
