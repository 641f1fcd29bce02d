package runner

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/sinks"
)

type memRejects struct{ lines []string }

func (m *memRejects) Reject(key, position, reason string) error {
	m.lines = append(m.lines, key+"|"+position+"|"+reason)
	return nil
}

func stringBatch(t *testing.T, keys []*string, vals []float64) arrow.RecordBatch {
	t.Helper()
	kb := array.NewStringBuilder(memory.DefaultAllocator)
	vb := array.NewFloat64Builder(memory.DefaultAllocator)
	for i, k := range keys {
		if k == nil {
			kb.AppendNull()
		} else {
			kb.Append(*k)
		}
		vb.Append(vals[i])
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "f", Type: arrow.PrimitiveTypes.Float64}}, nil)
	k, v := kb.NewArray(), vb.NewArray()
	defer k.Release()
	defer v.Release()
	return array.NewRecordBatch(schema, []arrow.Array{k, v}, int64(len(keys)))
}

func ptr(s string) *string { return &s }

func loc(batch string) func(int) string {
	return func(r int) string { return fmt.Sprintf("%s row %d", batch, r) }
}

// TestKeyGuardRejectsBadKeys: every key no store can hold is a reject naming
// the row and the reason, and the kept rows map back to their source rows.
func TestKeyGuardRejectsBadKeys(t *testing.T) {
	keys := []*string{ptr("a"), nil, ptr(""), ptr("b\x00c"), ptr("\xff\xfe"), ptr(strings.Repeat("k", sinks.MaxKeyBytes+1)), ptr("z")}
	rec := stringBatch(t, keys, []float64{0, 1, 2, 3, 4, 5, 6})
	defer rec.Release()
	g := newKeyGuard("id", "fail", 0)
	rej := &memRejects{}
	kept, n, err := g.check(rec, 0, loc("f.parquet"), rej)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.rec.Release()
	if n != 5 || kept.rec.NumRows() != 2 {
		t.Fatalf("rejected %d, kept %d rows; want 5 and 2", n, kept.rec.NumRows())
	}
	if got := kept.source(1); got != "f.parquet row 6" {
		t.Fatalf("kept row 1 is %q, want f.parquet row 6", got)
	}
	if v := kept.rec.Column(1).(*array.Float64).Value(1); v != 6 {
		t.Fatalf("kept row 1 has f=%v, want 6", v)
	}
	for i, want := range []string{"f.parquet row 1|column id: null key", "row 2|column id: empty key", "row 3|column id: key contains a NUL byte",
		"row 4|column id: key is not valid UTF-8", "row 5|column id: key is 513 bytes"} {
		if !strings.Contains(rej.lines[i], want) {
			t.Errorf("reject %d = %q, want it to contain %q", i, rej.lines[i], want)
		}
	}
}

// TestKeyGuardDuplicates: a key repeated within a shard (across batches)
// fails naming both rows, or is a reject under duplicate_keys: reject.
func TestKeyGuardDuplicates(t *testing.T) {
	b1 := stringBatch(t, []*string{ptr("a"), ptr("b")}, []float64{0, 1})
	b2 := stringBatch(t, []*string{ptr("c"), ptr("a")}, []float64{2, 3})
	defer b1.Release()
	defer b2.Release()

	g := newKeyGuard("id", "fail", 0)
	k1, _, err := g.check(b1, 0, loc("p1"), &memRejects{})
	if err != nil {
		t.Fatal(err)
	}
	k1.rec.Release()
	_, _, err = g.check(b2, 0, loc("p2"), &memRejects{})
	var de *sinks.DuplicateKeyError
	if !errors.As(err, &de) || de.Key != "a" || de.First != "p1 row 0" || de.Second != "p2 row 1" {
		t.Fatalf("err = %v, want duplicate key a at p1 row 0 and p2 row 1", err)
	}

	g = newKeyGuard("id", "reject", 0)
	rej := &memRejects{}
	k1, _, _ = g.check(b1, 0, loc("p1"), rej)
	k1.rec.Release()
	k2, n, err := g.check(b2, 0, loc("p2"), rej)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.rec.Release()
	if n != 1 || k2.rec.NumRows() != 1 || len(rej.lines) != 1 || !strings.Contains(rej.lines[0], "a|p2 row 1|column id: duplicate key (first at p1 row 0)") {
		t.Fatalf("rejected %d (%v), kept %d; want the repeat of a rejected", n, rej.lines, k2.rec.NumRows())
	}
	if g.sketch.Count() != 3 {
		t.Fatalf("sketch holds %d keys, want the 3 distinct kept ones", g.sketch.Count())
	}
}

// TestNonFinite finds NaN and ±Inf in scalar and list outputs, once per row.
func TestNonFinite(t *testing.T) {
	sb := array.NewFloat32Builder(memory.DefaultAllocator)
	sb.AppendValues([]float32{1, float32(math.NaN()), 3, 4}, nil)
	lb := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Float64)
	vb := lb.ValueBuilder().(*array.Float64Builder)
	for _, row := range [][]float64{{1, 2}, {math.Inf(1)}, {}, {5, math.Inf(-1)}} {
		lb.Append(true)
		vb.AppendValues(row, nil)
	}
	s, l := sb.NewArray(), lb.NewArray()
	defer s.Release()
	defer l.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "score", Type: s.DataType()}, {Name: "emb", Type: l.DataType()}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{s, l}, 4)
	defer rec.Release()
	bad := nonFinite(rec, 0, 2)
	if len(bad) != 2 || bad[0].row != 1 || bad[1].row != 3 || !strings.Contains(bad[0].reason, "score: NaN") || !strings.Contains(bad[1].reason, "emb: -Inf") {
		t.Fatalf("nonFinite = %+v, want rows 1 (score NaN) and 3 (emb -Inf)", bad)
	}
	kept, orig, err := dropRows(rec, []int{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release()
	if kept.NumRows() != 2 || orig[0] != 0 || orig[1] != 2 || len(nonFinite(kept, 0, 2)) != 0 {
		t.Fatalf("dropRows kept %d rows %v", kept.NumRows(), orig)
	}
}

func int64Batch(t *testing.T, keys ...int64) arrow.RecordBatch {
	t.Helper()
	kb := array.NewInt64Builder(memory.DefaultAllocator)
	defer kb.Release()
	kb.AppendValues(keys, nil)
	k := kb.NewArray()
	defer k.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	return array.NewRecordBatch(schema, []arrow.Array{k}, int64(len(keys)))
}

// TestKeyGuardIntKeysAscendingThenNot: integer keys that arrive ascending
// skip the map until the first key at or below the last; a repeat of any
// earlier key is still found after the switch, naming where it was first.
func TestKeyGuardIntKeysAscendingThenNot(t *testing.T) {
	for _, tc := range []struct {
		name       string
		b1, b2     []int64
		key, first string
	}{
		{"repeat of the last", []int64{1, 5, 9}, []int64{10, 9}, "9", "p1 row 2"},
		{"repeat of the first", []int64{1, 5, 9}, []int64{3, 1}, "1", "p1 row 0"},
		{"repeat within the batch that breaks the order", []int64{1, 2}, []int64{7, 4, 8, 7}, "7", "p2 row 0"},
		{"descending from the start", []int64{9, 8}, []int64{7, 8}, "8", "p1 row 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b1, b2 := int64Batch(t, tc.b1...), int64Batch(t, tc.b2...)
			defer b1.Release()
			defer b2.Release()
			g := newKeyGuard("id", "fail", 4)
			k1, _, err := g.check(b1, 0, loc("p1"), &memRejects{})
			if err != nil {
				t.Fatal(err)
			}
			k1.rec.Release()
			_, _, err = g.check(b2, 0, loc("p2"), &memRejects{})
			var de *sinks.DuplicateKeyError
			if !errors.As(err, &de) || de.Key != tc.key || de.First != tc.first {
				t.Fatalf("err = %v, want duplicate key %s first at %s", err, tc.key, tc.first)
			}
		})
	}
	// Ascending throughout: every key kept, all counted.
	g := newKeyGuard("id", "fail", 0)
	for i := range int64(3) {
		b := int64Batch(t, 10*i, 10*i+1, 10*i+5)
		k, n, err := g.check(b, 0, loc("p"), &memRejects{})
		if err != nil || n != 0 || k.rec.NumRows() != 3 {
			t.Fatalf("batch %d: kept %v, rejected %d, err %v", i, k.rec, n, err)
		}
		k.rec.Release()
		b.Release()
	}
	if g.ints != nil || g.sketch.Count() != 9 {
		t.Fatalf("ascending keys: map %v, sketch %d; want no map and 9 keys", g.ints != nil, g.sketch.Count())
	}
}

// BenchmarkKeyGuardInts: a 100k-row shard's keys in 1024-row batches,
// ascending (a sorted source) and shuffled.
func BenchmarkKeyGuardInts(b *testing.B) {
	const rows, batch = 100_000, 1024
	keys := make([]int64, rows)
	for i := range keys {
		keys[i] = int64(i) * 7
	}
	shuffled := slices.Clone(keys)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, c := range []struct {
		name string
		keys []int64
	}{{"ascending", keys}, {"shuffled", shuffled}} {
		b.Run(c.name, func(b *testing.B) {
			t := &testing.T{}
			var recs []arrow.RecordBatch
			for lo := 0; lo < rows; lo += batch {
				recs = append(recs, int64Batch(t, c.keys[lo:min(lo+batch, rows)]...))
			}
			b.ReportAllocs()
			for b.Loop() {
				g := newKeyGuard("id", "fail", rows)
				for _, r := range recs {
					k, _, err := g.check(r, 0, loc("p"), &memRejects{})
					if err != nil {
						b.Fatal(err)
					}
					k.rec.Release()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
		})
	}
}

// TestKeyGuardIntRepeatsHandOff: with duplicate_keys: reject, int64 keys
// taken by checkInts hand a repeat (in the same batch or of an earlier one)
// to the general loop, which rejects it naming the first row, then keeps
// taking the batch's later rows.
func TestKeyGuardIntRepeatsHandOff(t *testing.T) {
	b1, b2 := int64Batch(t, 1, 2, 3), int64Batch(t, 4, 2, 5, 5, 6)
	defer b1.Release()
	defer b2.Release()
	g := newKeyGuard("id", "reject", 0)
	rej := &memRejects{}
	k1, _, err := g.check(b1, 0, loc("p1"), rej)
	if err != nil {
		t.Fatal(err)
	}
	k1.rec.Release()
	k2, n, err := g.check(b2, 0, loc("p2"), rej)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.rec.Release()
	if n != 2 || k2.rec.NumRows() != 3 || len(rej.lines) != 2 ||
		!strings.Contains(rej.lines[0], "2|p2 row 1|column id: duplicate key (first at p1 row 1)") ||
		!strings.Contains(rej.lines[1], "5|p2 row 3|column id: duplicate key (first at p2 row 2)") {
		t.Fatalf("rejected %d (%q), kept %d; want the repeats of 2 and 5 rejected", n, rej.lines, k2.rec.NumRows())
	}
	if got := k2.rec.Column(0).(*array.Int64).Int64Values(); !slices.Equal(got, []int64{4, 5, 6}) {
		t.Fatalf("kept keys %v, want [4 5 6]", got)
	}
	if g.sketch.Count() != 6 {
		t.Fatalf("sketch holds %d keys, want the 6 distinct kept ones", g.sketch.Count())
	}
}
