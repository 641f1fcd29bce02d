package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/sources/parquet/parquettest"
)

// TestUnsupportedParquetCodec: a source file with a column chunk in a codec
// the reader cannot decode (LZO) is refused by validate and by run before
// anything runs: exit 2, naming the file, the column and the codec, and
// nothing published.
func TestUnsupportedParquetCodec(t *testing.T) {
	dir := workdir(t)
	parts, err := filepath.Glob(filepath.Join(dir, "data", "users", "dt=2026-11-01", "*.parquet"))
	if err != nil || len(parts) < 2 {
		t.Fatalf("fixture parts: %v %v", parts, err)
	}
	// Copy the partition; the last file claims LZO for column f3.
	for _, p := range parts {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, filepath.Join("lzo", filepath.Base(p)), string(data))
	}
	bad := filepath.Join(dir, "lzo", filepath.Base(parts[len(parts)-1]))
	if err := parquettest.SetCodec(bad, "f3", parquettest.CodecLZO); err != nil {
		t.Fatal(err)
	}
	spec := writeSpec(t, dir, "job.yaml", strings.NewReplacer("data/users/dt={{.date}}", "lzo").Replace(rankerSpec))
	for _, verb := range []string{"validate", "run"} {
		r := precog(t, dir, verb, spec, "--param", "date=2026-11-01")
		if r.code != 2 {
			t.Errorf("%s: exit %d, want 2\nstderr: %s", verb, r.code, r.stderr)
		}
		for _, w := range []string{filepath.Base(bad), `column "f3" is compressed with LZO (codec 3)`} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", verb, w, r.stderr)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("an unreadable source published output (stat out: %v)", err)
	}
}
