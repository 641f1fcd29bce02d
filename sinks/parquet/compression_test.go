package parquet

import (
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/precog-ml/precog/jobs"
)

// The sink takes exactly the compressions jobs validates, by jobs'
// constants, and jobs' default when the spec (built in code) leaves it out:
// a spelling the spec refuses ("uncompressed", "ZSTD") is refused here too.
func TestNewTakesTheSpecsCompressions(t *testing.T) {
	for comp, want := range map[string]compress.Compression{
		"":                     compress.Codecs.Snappy,
		jobs.CompressionSnappy: compress.Codecs.Snappy,
		jobs.CompressionZstd:   compress.Codecs.Zstd,
		jobs.CompressionGzip:   compress.Codecs.Gzip,
		jobs.CompressionNone:   compress.Codecs.Uncompressed,
	} {
		s, err := New(testJob, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "out"), Compression: comp})
		if err != nil {
			t.Errorf("compression %q: %v", comp, err)
			continue
		}
		if s.codec != want {
			t.Errorf("compression %q: codec %v, want %v", comp, s.codec, want)
		}
		s.Close()
	}
	for _, comp := range []string{"uncompressed", "ZSTD", "lz4"} {
		if _, err := New(testJob, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "out"), Compression: comp}); err == nil {
			t.Errorf("compression %q accepted; the spec refuses it", comp)
		}
	}
}
