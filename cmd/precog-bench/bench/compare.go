package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/sources"
	pqsource "github.com/precog-ml/precog/sources/parquet"
)

// compareConfig is the -compare mode's flags: `make test-gpu` compares a
// job's Parquet output on cuda:0 with the same job's on the CPU on a
// machine without Go.
type compareConfig struct {
	dirs, key string
	tol       float64
}

func compareFlags(fs *flag.FlagSet) *compareConfig {
	c := &compareConfig{}
	fs.StringVar(&c.dirs, "compare", "", "compare mode: `CPU_DIR,GPU_DIR`, two Parquet outputs of one job, joined on -compare-key; every float differs by at most -compare-tolerance, or the exit status is 1; integer lists (top-k ids) may differ only on ties, counted and reported")
	fs.StringVar(&c.key, "compare-key", "user_id", "the key column of -compare")
	fs.Float64Var(&c.tol, "compare-tolerance", 1e-3, "the largest |Δ| -compare accepts between float values")
	return c
}

// outputRow is one output row's numbers: floats and integers in column
// order, lists flattened.
type outputRow struct {
	floats []float64
	ints   []int64
}

// compareResult is what -compare found.
type compareResult struct {
	Rows, IntRowsDiffer int
	MaxAbs              float64
}

// main runs the -compare mode and returns the exit status.
func (c *compareConfig) main() int {
	a, b, ok := strings.Cut(c.dirs, ",")
	if !ok {
		fmt.Fprintln(os.Stderr, "-compare: want CPU_DIR,GPU_DIR")
		return 2
	}
	r, err := compareOutputs(context.Background(), a, b, c.key)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	fmt.Printf("%d rows, max |Δ| %.3g (tolerance %g), %d rows with other integers (ties in top-k order)\n", r.Rows, r.MaxAbs, c.tol, r.IntRowsDiffer)
	if r.MaxAbs > c.tol {
		return 1
	}
	return 0
}

// compareOutputs joins two outputs on key and compares their numbers.
func compareOutputs(ctx context.Context, a, b, key string) (compareResult, error) {
	ra, err := readOutput(ctx, a, key)
	if err != nil {
		return compareResult{}, fmt.Errorf("%s: %w", a, err)
	}
	rb, err := readOutput(ctx, b, key)
	if err != nil {
		return compareResult{}, fmt.Errorf("%s: %w", b, err)
	}
	if len(ra) != len(rb) {
		return compareResult{}, fmt.Errorf("%d rows in %s, %d in %s", len(ra), a, len(rb), b)
	}
	res := compareResult{Rows: len(ra)}
	for k, x := range ra {
		y, ok := rb[k]
		if !ok {
			return res, fmt.Errorf("key %s in %s only", k, a)
		}
		if len(x.floats) != len(y.floats) || len(x.ints) != len(y.ints) {
			return res, fmt.Errorf("key %s: %d/%d numbers against %d/%d", k, len(x.floats), len(x.ints), len(y.floats), len(y.ints))
		}
		for i := range x.floats {
			res.MaxAbs = max(res.MaxAbs, math.Abs(x.floats[i]-y.floats[i]))
		}
		for i := range x.ints {
			if x.ints[i] != y.ints[i] {
				res.IntRowsDiffer++
				break
			}
		}
	}
	return res, nil
}

// readOutput reads every row of a Parquet output directory by key.
func readOutput(ctx context.Context, dir, key string) (map[string]outputRow, error) {
	src, err := pqsource.New(dir)
	if err != nil {
		return nil, err
	}
	plans, err := src.Plan(ctx, 1<<20)
	if err != nil {
		return nil, err
	}
	out := map[string]outputRow{}
	for _, p := range plans {
		r, err := src.Open(ctx, p.Plan, sources.ReadOptions{BatchSize: 4096})
		if err != nil {
			return nil, err
		}
		for {
			rec, err := r.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				r.Close()
				return nil, err
			}
			err = addRows(out, rec, key)
			rec.Release()
			if err != nil {
				r.Close()
				return nil, err
			}
		}
		if err := r.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func addRows(out map[string]outputRow, rec arrow.RecordBatch, key string) error {
	idx := rec.Schema().FieldIndices(key)
	if len(idx) == 0 {
		return fmt.Errorf("no key column %q", key)
	}
	keys := rec.Column(idx[0])
	for i := range int(rec.NumRows()) {
		var row outputRow
		for c, col := range rec.Columns() {
			if c != idx[0] {
				appendNumbers(&row, col, i)
			}
		}
		out[keys.ValueStr(i)] = row
	}
	return nil
}

// appendNumbers adds row i of col's numbers to row (other types add none).
func appendNumbers(row *outputRow, col arrow.Array, i int) {
	switch a := col.(type) {
	case *array.Float32:
		row.floats = append(row.floats, float64(a.Value(i)))
	case *array.Float64:
		row.floats = append(row.floats, a.Value(i))
	case *array.Int64:
		row.ints = append(row.ints, a.Value(i))
	case *array.Int32:
		row.ints = append(row.ints, int64(a.Value(i)))
	case *array.List:
		lo, hi := a.ValueOffsets(i)
		vals := a.ListValues()
		for j := int(lo); j < int(hi); j++ {
			appendNumbers(row, vals, j)
		}
	}
}
