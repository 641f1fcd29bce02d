// Package sourcetest is the conformance suite every sources.Source passes:
// the properties the runner and the ledger rely on, checked the same way for
// each implementation (sources/parquet, sources/postgres).
//
// A source's own tests call Run with a Harness that builds a dataset of a
// given size in that source's format. The suite then checks that plans are
// stable across calls (the ledger stores them), that the shards of a plan
// cover every row exactly once (no duplicates and no gaps in any sink), that
// batches honour the projection and batch size, that Locate names a row and
// stays valid after later batches (rejects name their row), that a missing
// column is an error naming it, and that a cancelled read stops.
package sourcetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/precog-ml/precog/sources"
)

// Fixture is one dataset as the source under test reads it.
type Fixture struct {
	// Source reads the dataset.
	Source sources.Source
	// Key is the entity key column (string or integer).
	Key string
	// Keys is every key of the dataset as text (strconv form for integers),
	// each exactly once.
	Keys []string
	// RowsPerShard is a shard size that splits the dataset into several
	// shards.
	RowsPerShard int64
	// ExactRows is set when a plan's Rows are exact counts (file metadata),
	// not estimates (a query planner's).
	ExactRows bool
}

// Harness builds datasets for the suite.
type Harness struct {
	// New writes a dataset of rows rows (keys unique, at least 2 columns)
	// and returns a source over it. It is called once per case.
	New func(t *testing.T, rows int) Fixture
}

// rows is the size of every case's dataset: enough for several shards and
// several batches per shard.
const rows = 1000

// Run runs every conformance case as a subtest.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		fn   func(*testing.T, Fixture)
	}{
		{"SchemaHasKey", schemaHasKey},
		{"PlanStable", planStable},
		{"ShardsCoverEveryRowOnce", shardsCoverEveryRowOnce},
		{"ProjectionAndBatchSize", projectionAndBatchSize},
		{"LocateNamesRows", locateNamesRows},
		{"MissingColumnNamed", missingColumnNamed},
		{"CancelledReadStops", cancelledReadStops},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := h.New(t, rows)
			if len(f.Keys) != rows {
				t.Fatalf("harness: %d keys for a dataset of %d rows", len(f.Keys), rows)
			}
			c.fn(t, f)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func schemaHasKey(t *testing.T, f Fixture) {
	sch, err := f.Source.Schema(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(sch.FieldIndices(f.Key)) != 1 {
		t.Fatalf("schema %v lacks the key column %q", sch, f.Key)
	}
}

func plan(t *testing.T, f Fixture) []sources.ShardPlan {
	t.Helper()
	plans, err := f.Source.Plan(ctxFor(t), f.RowsPerShard)
	if err != nil {
		t.Fatalf("Plan(%d): %v", f.RowsPerShard, err)
	}
	if len(plans) < 2 {
		t.Fatalf("Plan(%d) of %d rows gave %d shard(s): the harness's shard size does not split the dataset", f.RowsPerShard, rows, len(plans))
	}
	return plans
}

// planStable: the ledger stores the plan, and a resumed run re-plans to
// check the dataset did not change, so two plans of an unchanged dataset
// are equal, shard for shard.
func planStable(t *testing.T, f Fixture) {
	a, b := plan(t, f), plan(t, f)
	if len(a) != len(b) {
		t.Fatalf("two plans of one dataset: %d then %d shards", len(a), len(b))
	}
	for i := range a {
		if !jsonEqual(a[i].Plan, b[i].Plan) || a[i].Rows != b[i].Rows || a[i].Desc != b[i].Desc {
			t.Errorf("shard %d differs between two plans:\n%s %d %q\n%s %d %q", i, a[i].Plan, a[i].Rows, a[i].Desc, b[i].Plan, b[i].Rows, b[i].Desc)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// read streams one shard and calls each with every batch (released after).
func read(t *testing.T, f Fixture, sp sources.ShardPlan, opts sources.ReadOptions, each func(sources.BatchReader, arrow.RecordBatch)) {
	t.Helper()
	ctx := ctxFor(t)
	r, err := f.Source.Open(ctx, sp.Plan, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", sp.Desc, err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close(%s): %v", sp.Desc, err)
		}
	}()
	for {
		rec, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("Next(%s): %v", sp.Desc, err)
		}
		each(r, rec)
		rec.Release()
	}
}

// keyText is row i of a key column as text.
func keyText(t *testing.T, col arrow.Array, i int) string {
	t.Helper()
	switch c := col.(type) {
	case *array.String:
		return c.Value(i)
	case *array.LargeString:
		return c.Value(i)
	case *array.Binary:
		return string(c.Value(i))
	case *array.Int64:
		return fmt.Sprint(c.Value(i))
	case *array.Int32:
		return fmt.Sprint(c.Value(i))
	}
	t.Fatalf("key column of type %s: not a key type this suite reads", col.DataType())
	return ""
}

// shardsCoverEveryRowOnce: reading every shard of a plan yields every key
// of the dataset exactly once, so no sink gets duplicates or gaps.
func shardsCoverEveryRowOnce(t *testing.T, f Fixture) {
	seen := map[string]int{}
	for i, sp := range plan(t, f) {
		n := 0
		read(t, f, sp, sources.ReadOptions{Columns: []string{f.Key}, BatchSize: 64}, func(_ sources.BatchReader, rec arrow.RecordBatch) {
			for r := range int(rec.NumRows()) {
				seen[keyText(t, rec.Column(0), r)]++
			}
			n += int(rec.NumRows())
		})
		if f.ExactRows && int64(n) != sp.Rows {
			t.Errorf("shard %d (%s): read %d rows, the plan says %d", i, sp.Desc, n, sp.Rows)
		}
	}
	for _, k := range f.Keys {
		switch seen[k] {
		case 1:
		case 0:
			t.Errorf("key %q read by no shard", k)
		default:
			t.Errorf("key %q read %d times", k, seen[k])
		}
		delete(seen, k)
	}
	if len(seen) > 0 {
		t.Errorf("%d keys read that the dataset does not hold (e.g. %v)", len(seen), slices.Collect(func(yield func(string) bool) {
			for k := range seen {
				yield(k)
				return
			}
		}))
	}
}

// projectionAndBatchSize: a batch holds the projected columns, in the
// order asked, and at most BatchSize rows.
func projectionAndBatchSize(t *testing.T, f Fixture) {
	sch, err := f.Source.Schema(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, fld := range sch.Fields() {
		if fld.Name != f.Key {
			other = fld.Name
			break
		}
	}
	if other == "" {
		t.Fatal("harness: the dataset needs a column besides the key")
	}
	const batch = 37
	sizes := map[int64]bool{}
	read(t, f, plan(t, f)[0], sources.ReadOptions{Columns: []string{other, f.Key}, BatchSize: batch}, func(_ sources.BatchReader, rec arrow.RecordBatch) {
		if got := rec.Schema().Fields(); len(got) != 2 || got[0].Name != other || got[1].Name != f.Key {
			t.Fatalf("projection [%s %s] gave columns %v", other, f.Key, rec.Schema())
		}
		if rec.NumRows() > batch || rec.NumRows() == 0 {
			t.Errorf("a batch of %d rows with BatchSize %d", rec.NumRows(), batch)
		}
		sizes[rec.NumRows()] = true
	})
	if !sizes[batch] {
		t.Errorf("no batch of the full BatchSize %d in a shard of ~%d rows (sizes %v)", batch, f.RowsPerShard, sizes)
	}
}

// locateNamesRows: Position and Locate name a row of the last batch, and a
// Locate function keeps naming its own batch's rows after later batches
// (later pipeline stages name rejects with it).
func locateNamesRows(t *testing.T, f Fixture) {
	type named struct {
		loc  func(int) string
		want []string
	}
	var kept []named
	read(t, f, plan(t, f)[0], sources.ReadOptions{Columns: []string{f.Key}, BatchSize: 50}, func(r sources.BatchReader, rec arrow.RecordBatch) {
		loc := r.Locate()
		last := int(rec.NumRows()) - 1
		want := []string{r.Position(0), r.Position(last)}
		for i, row := range []int{0, last} {
			if got := loc(row); got != want[i] {
				t.Errorf("Locate()(%d) = %q, Position(%d) = %q", row, got, row, want[i])
			}
		}
		if want[0] == "" || want[0] == want[1] && last > 0 {
			t.Errorf("rows 0 and %d of a batch are named %q and %q", last, want[0], want[1])
		}
		if !strings.Contains(want[0], "row") {
			t.Errorf("Position(0) = %q: names no row", want[0])
		}
		kept = append(kept, named{loc, want})
	})
	if len(kept) < 2 {
		t.Fatalf("%d batches: the suite needs a shard of several batches", len(kept))
	}
	for i, k := range kept {
		if got := k.loc(0); got != k.want[0] {
			t.Errorf("batch %d: Locate()(0) became %q after later batches, was %q", i, got, k.want[0])
		}
	}
	if kept[0].want[0] == kept[1].want[0] {
		t.Errorf("the first rows of batches 0 and 1 are both named %q", kept[0].want[0])
	}
}

// missingColumnNamed: projecting a column the dataset lacks is an error
// that names it (at Open or at the first Next), never a silent null column.
func missingColumnNamed(t *testing.T, f Fixture) {
	const col = "no_such_column_q7"
	ctx := ctxFor(t)
	sp := plan(t, f)[0]
	r, err := f.Source.Open(ctx, sp.Plan, sources.ReadOptions{Columns: []string{f.Key, col}, BatchSize: 64})
	if err == nil {
		var rec arrow.RecordBatch
		rec, err = r.Next(ctx)
		if rec != nil {
			rec.Release()
		}
		_ = r.Close()
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("reading missing column %q: %v, want an error naming it", col, err)
	}
	if !strings.Contains(err.Error(), col) {
		t.Errorf("the error does not name the column %q: %v", col, err)
	}
}

// cancelledReadStops: a read whose context is cancelled returns an error
// (at Open or Next) instead of streaming on or hanging.
func cancelledReadStops(t *testing.T, f Fixture) {
	sp := plan(t, f)[0]
	ctx, cancel := context.WithCancel(ctxFor(t))
	r, err := f.Source.Open(ctx, sp.Plan, sources.ReadOptions{Columns: []string{f.Key}, BatchSize: 10})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer r.Close()
	rec, err := r.Next(ctx)
	if err != nil {
		t.Fatalf("first Next: %v", err)
	}
	rec.Release()
	cancel()
	for n := 0; ; n++ {
		rec, err := r.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("the cancelled read streamed to its end (%d more batches)", n)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a cancelled read ended with %v, want context.Canceled in its chain", err)
			}
			return
		}
		rec.Release()
		if n > 2 {
			t.Fatalf("the cancelled read went on for %d batches", n)
		}
	}
}
