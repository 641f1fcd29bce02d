package parquet

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/precog-ml/precog/sources/sourcetest"
)

// The Parquet source passes the sources conformance suite over a directory
// of three files (row groups of 100), read through a glob.
func TestSourceConformance(t *testing.T) {
	sourcetest.Run(t, sourcetest.Harness{New: func(t *testing.T, rows int) sourcetest.Fixture {
		dir := t.TempDir()
		per := int64(rows) / 3
		var keys []string
		for f, start := 0, int64(0); start < int64(rows); f, start = f+1, start+per {
			n := min(per, int64(rows)-start)
			if f == 2 {
				n = int64(rows) - start
			}
			writePgFile(t, filepath.Join(dir, fmt.Sprintf("part-%d.parquet", f)), start, n, 100)
			for i := start; i < start+n; i++ {
				keys = append(keys, makePgRow(i).Key)
			}
			if f == 2 {
				break
			}
		}
		src, err := New(filepath.Join(dir, "*.parquet"))
		if err != nil {
			t.Fatal(err)
		}
		return sourcetest.Fixture{Source: src, Key: "key", Keys: keys, RowsPerShard: 200, ExactRows: true}
	}})
}
