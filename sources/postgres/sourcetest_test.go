package postgres

import (
	"fmt"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sources/sourcetest"
)

// The Postgres query source passes the sources conformance suite, range
// sharded on an integer column.
func TestSourceConformance(t *testing.T) {
	pg := testservers.Postgres(t)
	n := 0
	sourcetest.Run(t, sourcetest.Harness{New: func(t *testing.T, rows int) sourcetest.Fixture {
		n++
		table := fmt.Sprintf("conf_%d", n)
		pg.Exec(t, fmt.Sprintf(`CREATE TABLE %s AS SELECT g AS id, 'user-' || g AS key, g * 0.5 AS f FROM generate_series(1, %d) g`, table, rows))
		pg.Exec(t, "ANALYZE "+table)
		keys := make([]string, rows)
		for i := range keys {
			keys[i] = fmt.Sprintf("user-%d", i+1)
		}
		src := newSource(t, pg, "SELECT id, key, f FROM "+table, "id")
		return sourcetest.Fixture{Source: src, Key: "key", Keys: keys, RowsPerShard: 200}
	}})
}
