package parquet

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/precog-ml/precog/sources/parquet/internal/tcompact"
)

// TestFooterRoundTrip re-encodes every corpus footer through the generic
// Thrift codec the footer rewrite uses: the re-encoded footer decodes to
// the same tree, and arrow-go reads from it the same schema, row groups
// and column chunks as from the original.
func TestFooterRoundTrip(t *testing.T) {
	for rel := range corpusPins {
		path := filepath.Join(corpusDir, filepath.FromSlash(rel))
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := readFooterBytes(f, st.Size())
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		tree, err := tcompact.Decode(raw)
		if err != nil {
			t.Fatalf("%s: decode: %v", rel, err)
		}
		enc, err := tcompact.Encode(tree)
		if err != nil {
			t.Fatalf("%s: encode: %v", rel, err)
		}
		again, err := tcompact.Decode(enc)
		if err != nil || !reflect.DeepEqual(tree, again) {
			t.Fatalf("%s: re-encoded footer decodes differently (%v)", rel, err)
		}
		orig, err1 := parseFooter(raw)
		back, err2 := parseFooter(enc)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%s: arrow-go parses original: %v, re-encoded: %v", rel, err1, err2)
		}
		if err1 != nil {
			continue // unknown-logical-type.parquet: arrow-go refuses both alike
		}
		if orig.Schema.String() != back.Schema.String() || orig.NumRows != back.NumRows || orig.NumRowGroups() != back.NumRowGroups() ||
			!reflect.DeepEqual(orig.FileMetaData, back.FileMetaData) {
			t.Fatalf("%s: arrow-go reads a different footer after the round trip", rel)
		}
	}
}

// parseFooter is metadata.NewFileMetaData with its panics as errors.
func parseFooter(raw []byte) (md *metadata.FileMetaData, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return metadata.NewFileMetaData(raw, nil)
}

// TestFooterDecodeRejectsGarbage: the generic decoder returns errors, not
// panics, on truncated and hostile footers (deep nesting included).
func TestFooterDecodeRejectsGarbage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(corpusDir, "data", "alltypes_plain.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(corpusDir, "data", "alltypes_plain.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	footer, err := readFooterBytes(f, int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(footer); n += 7 {
		if _, err := tcompact.Decode(footer[:n]); err == nil {
			t.Fatalf("footer cut at %d of %d bytes decoded without error", n, len(footer))
		}
	}
	// A struct field holding a struct field holding …, 10000 deep.
	deep := []byte(strings.Repeat("\x1c", 10000))
	if _, err := tcompact.Decode(deep); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Fatalf("deep nesting: %v", err)
	}
}
