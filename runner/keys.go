package runner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/hll"
	"github.com/precog-ml/precog/sinks"
)

// keyGuard checks one shard attempt's keys before anything is encoded or
// written. A key no store can hold (null, empty, over sinks.MaxKeyBytes,
// NUL, invalid UTF-8) makes its row a reject. A key seen earlier in the shard
// is a duplicate: the attempt fails naming both rows (duplicate_keys: fail)
// or the repeat becomes a reject (duplicate_keys: reject). Every kept key
// goes into the shard's HyperLogLog, merged across shards at publish.
//
// Memory is one map entry per key of the shard: bounded by
// source.rows_per_shard, not by the dataset.
type keyGuard struct {
	column string
	reject bool // duplicate_keys: reject
	// hint is the shard's planned rows: the key map is sized for them at
	// the first batch, not grown (and rehashed) row by row.
	hint int
	strs map[string]uint64
	ints map[int64]uint64
	// asc holds the shard's integer keys while they arrive strictly
	// ascending (a source sorted by key, the usual layout): no key can
	// repeat then, so none is looked up; the first key at or below the
	// last moves them into ints. Probing a map of a shard's keys was a
	// quarter of a null-model job's CPU (a cache miss per row).
	asc []placedKey
	// locs[b] names the rows of the shard's batch b (for duplicates).
	locs   []func(int) string
	sketch *hll.Sketch
}

// maxKeyHint caps a key map's presizing (a plan's row estimate is
// metadata, not a promise).
const maxKeyHint = 1 << 22

func newKeyGuard(column, duplicatePolicy string, estRows int64) *keyGuard {
	return &keyGuard{column: column, reject: duplicatePolicy == "reject",
		hint: int(min(max(estRows, 0), maxKeyHint)), sketch: hll.New()}
}

// keptRows is a source batch with its rejected-key rows left out.
type keptRows struct {
	rec arrow.RecordBatch
	// orig[r] is row r's index in the source batch; nil when no row was dropped.
	orig []int
	// loc names rows of the source batch (sources.BatchReader.Locate).
	loc func(int) string
}

// source names row r of kept.rec in the source.
func (k keptRows) source(r int) string {
	if k.orig != nil {
		r = k.orig[r]
	}
	return k.loc(r)
}

// check returns the batch's rows with good, first-seen keys (rec itself
// when all are kept, else a new record; the caller releases both) and the
// number of rows it rejected.
func (g *keyGuard) check(rec arrow.RecordBatch, keyIdx int, loc func(int) string, rejects RejectWriter) (keptRows, int, error) {
	batchNo := uint64(len(g.locs))
	g.locs = append(g.locs, loc)
	col := rec.Column(keyIdx)
	text := isStringKey(col.DataType())
	if text && g.strs == nil {
		g.strs = make(map[string]uint64, g.hint)
	}
	var drop []int
	start := 0
	if a, ok := col.(*array.Int64); ok && a.NullN() == 0 {
		start = g.checkInts(a.Int64Values(), batchNo)
	}
	for r := start; r < int(rec.NumRows()); r++ {
		place := batchNo<<32 | uint64(r)
		reason, key, first, dup := "", "", uint64(0), false
		if col.IsNull(r) {
			reason = "null key"
		} else if text {
			key = keyString(col, r)
			if reason = sinks.CheckKey(key); reason == "" {
				if first, dup = g.strs[key]; !dup {
					g.strs[strings.Clone(key)] = place
					g.sketch.AddString(key)
				}
			}
		} else {
			v, err := keyInt(col, r)
			if err != nil {
				reason = err.Error()
			} else if first, dup = g.seenInt(v, place); !dup {
				g.sketch.AddInt(v)
			}
			switch {
			case err != nil:
				key = col.ValueStr(r) // the value as the source holds it
			case dup:
				key = strconv.FormatInt(v, 10) // only an error or a reject names it
			}
		}
		if dup {
			firstAt := g.locs[first>>32](int(first & 0xffffffff))
			if !g.reject {
				return keptRows{}, 0, &sinks.DuplicateKeyError{Key: key, First: firstAt, Second: loc(r)}
			}
			reason = "duplicate key (first at " + firstAt + ")"
		}
		if reason == "" {
			continue
		}
		if err := rejects.Reject(key, loc(r), fmt.Sprintf("column %s: %s", g.column, reason)); err != nil {
			return keptRows{}, 0, fmt.Errorf("rejects: %w", err)
		}
		drop = append(drop, r)
	}
	if len(drop) == 0 {
		rec.Retain()
		return keptRows{rec: rec, loc: loc}, 0, nil
	}
	kept, orig, err := dropRows(rec, drop)
	if err != nil {
		return keptRows{}, 0, err
	}
	return keptRows{rec: kept, orig: orig, loc: loc}, len(drop), nil
}

// placedKey is an integer key and where it was first seen
// (batch<<32 | row).
type placedKey struct {
	key   int64
	place uint64
}

// seenInt records integer key v at place unless the shard has it already,
// and returns where it was first seen.
// checkInts takes the rows of an int64 key column without nulls (the
// usual integer key) in a loop of its own, with no interface call or type
// switch per row. It stops at the first repeated key, leaving it unrecorded,
// and returns its row (len(vals) when none): check's general loop takes
// the rest, and finds the repeat again.
func (g *keyGuard) checkInts(vals []int64, batchNo uint64) int {
	r := 0
	if g.ints == nil {
		r = g.appendAscending(vals, batchNo)
	}
	for ; r < len(vals); r++ {
		v := vals[r]
		if _, dup := g.seenInt(v, batchNo<<32|uint64(r)); dup {
			return r
		}
		g.sketch.AddInt(v)
	}
	return len(vals)
}

// appendAscending records the longest prefix of vals that continues the
// shard's strictly ascending keys (what seenInt does for each of them, in
// one comparison loop and one append loop, without a call per row) and
// returns its length; seenInt takes the rest.
func (g *keyGuard) appendAscending(vals []int64, batchNo uint64) int {
	var n int
	var prev int64
	if k := len(g.asc); k > 0 {
		prev = g.asc[k-1].key
	} else if len(vals) > 0 {
		prev, n = vals[0], 1
	}
	for n < len(vals) && vals[n] > prev {
		prev = vals[n]
		n++
	}
	if g.asc == nil {
		g.asc = make([]placedKey, 0, max(g.hint, 1024, n))
	}
	g.asc = slices.Grow(g.asc, n)
	place := batchNo << 32
	for r, v := range vals[:n] {
		g.asc = append(g.asc, placedKey{v, place | uint64(r)})
		g.sketch.AddInt(v)
	}
	return n
}

func (g *keyGuard) seenInt(v int64, place uint64) (first uint64, dup bool) {
	if g.ints == nil {
		if n := len(g.asc); n == 0 || v > g.asc[n-1].key {
			if g.asc == nil {
				g.asc = make([]placedKey, 0, max(g.hint, 1024))
			}
			g.asc = append(g.asc, placedKey{v, place})
			return 0, false
		}
		g.ints = make(map[int64]uint64, max(g.hint, 2*len(g.asc)))
		for _, k := range g.asc {
			g.ints[k.key] = k.place
		}
		g.asc = nil
	}
	if first, dup = g.ints[v]; !dup {
		g.ints[v] = place
	}
	return first, dup
}

// dropRows returns rec without the rows in drop (ascending) and the source
// index of each kept row. Drops are rare (bad rows), so this copies through
// slices and Concatenate rather than a general filter kernel.
func dropRows(rec arrow.RecordBatch, drop []int) (arrow.RecordBatch, []int, error) {
	n := int(rec.NumRows())
	var spans [][2]int
	orig := make([]int, 0, n-len(drop))
	lo := 0
	for _, d := range append(drop, n) {
		if d > lo {
			spans = append(spans, [2]int{lo, d})
			for r := lo; r < d; r++ {
				orig = append(orig, r)
			}
		}
		lo = d + 1
	}
	cols := make([]arrow.Array, 0, rec.NumCols())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for i := range int(rec.NumCols()) {
		c, err := concatSpans(rec.Column(i), spans)
		if err != nil {
			return nil, nil, fmt.Errorf("drop rejected rows: column %s: %w", rec.ColumnName(i), err)
		}
		cols = append(cols, c)
	}
	return array.NewRecordBatch(rec.Schema(), cols, int64(len(orig))), orig, nil
}

func concatSpans(col arrow.Array, spans [][2]int) (arrow.Array, error) {
	if len(spans) == 0 {
		return array.NewSlice(col, 0, 0), nil
	}
	parts := make([]arrow.Array, len(spans))
	for i, s := range spans {
		parts[i] = array.NewSlice(col, int64(s[0]), int64(s[1]))
	}
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	if len(parts) == 1 {
		parts[0].Retain()
		return parts[0], nil
	}
	return array.Concatenate(parts, memory.DefaultAllocator)
}
