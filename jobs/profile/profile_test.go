package profile

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
)

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "user_id", Type: arrow.BinaryTypes.String},
	{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
}, nil)

// batch builds rows for keys [from, to): score from score(i), items from items(i).
func batch(t *testing.T, keys []int, score func(i int) float64, items func(i int) []int64) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, i := range keys {
		b.Field(0).(*array.StringBuilder).Append("u" + strconv.Itoa(i))
		b.Field(1).(*array.Float32Builder).Append(float32(score(i)))
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		for _, v := range items(i) {
			lb.ValueBuilder().(*array.Int64Builder).Append(v)
		}
	}
	return b.NewRecordBatch()
}

func build(t *testing.T, keys []int, score func(int) float64, items func(int) []int64) *Profile {
	t.Helper()
	b := NewBuilder(Options{Fields: []string{"score", "items"}, SampleFields: []string{"items"}, SampleSize: 500})
	// Two batches, as two shards would, then merged through the stored form.
	half := len(keys) / 2
	r1, r2 := batch(t, keys[:half], score, items), batch(t, keys[half:], score, items)
	defer r1.Release()
	defer r2.Release()
	b.Add(r1, 0)
	b2 := NewBuilder(Options{Fields: []string{"score", "items"}, SampleFields: []string{"items"}, SampleSize: 500})
	b2.Add(r2, 0)
	p1, err := Decode(b.Profile().Encode())
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Decode(b2.Profile().Encode())
	if err != nil {
		t.Fatal(err)
	}
	m := New(500)
	for _, p := range []*Profile{p1, p2} {
		if err := m.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestChecksOnProfiles(t *testing.T) {
	const n = 20000
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([]float64, n)
	for i := range base {
		base[i] = rng.Float64()
	}
	items := func(i int) []int64 { return []int64{int64(i), int64(i + 1), int64(i + 2), int64(i + 3)} }
	old := build(t, seq(n), func(i int) float64 { return base[i] }, items)
	if old.Rows != n || old.Fields["score"].Values != n || len(old.Sample) != 500 {
		t.Fatalf("profile: rows %d values %d sample %d", old.Rows, old.Fields["score"].Values, len(old.Sample))
	}
	min1, max1 := 0.0, 1.0
	max2 := 0.2
	spec := &jobs.ChecksSpec{
		Rows:     &jobs.RowsCheck{MinRatio: &[]float64{0.9}[0]},
		KeyChurn: &jobs.KeyChurnCheck{Max: &[]float64{0.05}[0]},
		Outputs: map[string]jobs.OutputCheck{
			"score": {MaxPSI: &max2, Range: []float64{min1, max1}},
			"items": {MinOverlapAtK: &[]float64{0.5}[0]},
		},
	}
	bl := &Baseline{RunID: "r1", Version: "v1", RowsOut: n, Profile: old}

	// Small noise: every check passes.
	noisy := build(t, seq(n), func(i int) float64 { return math.Min(1, math.Max(0, base[i]+rng.NormFloat64()*0.01)) }, items)
	if r := Evaluate(spec, bl, noisy, n); !r.Passed {
		t.Errorf("small noise held: %v", r.Failed())
	}
	// 30% of keys lost: rows and churn fail, churn near 0.3.
	lost := build(t, seq(n*7/10), func(i int) float64 { return base[i] }, items)
	r := Evaluate(spec, bl, lost, n*7/10)
	if r.Passed || !failed(r, "rows.min_ratio") || !failed(r, "key_churn.max") {
		t.Errorf("lost keys passed: %+v", r.Checks)
	}
	if c := find(r, "key_churn.max"); math.Abs(c.Value-0.3) > 0.08 || c.Error == "" {
		t.Errorf("churn %v %q, want about 0.3 with its error", c.Value, c.Error)
	}
	// Shifted distribution within the range: PSI fails.
	shifted := build(t, seq(n), func(i int) float64 { return base[i]*0.5 + 0.4 }, items)
	if r := Evaluate(spec, bl, shifted, n); !failed(r, "outputs.score.max_psi") || failed(r, "rows.min_ratio") {
		t.Errorf("shift not held by psi: %+v", r.Checks)
	}
	// Shuffled top-k: overlap fails.
	other := build(t, seq(n), func(i int) float64 { return base[i] }, func(i int) []int64 { return []int64{int64(i + 100), int64(i + 101), int64(i + 2), int64(i + 103)} })
	if r := Evaluate(spec, bl, other, n); !failed(r, "outputs.items.min_overlap_at_k") {
		t.Errorf("shuffled lists passed: %+v", r.Checks)
	} else if c := find(r, "outputs.items.min_overlap_at_k"); math.Abs(c.Value-0.25) > 1e-9 {
		t.Errorf("overlap %v, want 0.25", c.Value)
	}
	// First run: only absolute bounds (scores above 1 fail the range).
	out := build(t, seq(n), func(i int) float64 { return base[i] + 0.5 }, items)
	fr := Evaluate(spec, nil, out, n)
	if !fr.FirstRun || fr.Note == "" || len(fr.Checks) != 1 || fr.Checks[0].Name != "outputs.score.range" || fr.Checks[0].Passed {
		t.Errorf("first run: %+v", fr)
	}
}

func find(r Report, name string) Check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return Check{}
}

func failed(r Report, name string) bool {
	for _, c := range r.Checks {
		if c.Name == name {
			return !c.Passed
		}
	}
	return false
}

// TestIntKeysHashLikeStrings: an int64 key is sampled by the hash of its
// decimal form, as the same key stored as a string, so that a job that
// changes its key type compares the same keys.
func TestIntKeysHashLikeStrings(t *testing.T) {
	intSchema := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil)
	strSchema := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String}}, nil)
	ib := array.NewRecordBuilder(memory.DefaultAllocator, intSchema)
	sb := array.NewRecordBuilder(memory.DefaultAllocator, strSchema)
	defer ib.Release()
	defer sb.Release()
	for i := int64(-50); i < 950; i++ {
		ib.Field(0).(*array.Int64Builder).Append(i)
		sb.Field(0).(*array.StringBuilder).Append(strconv.FormatInt(i, 10))
	}
	ir, sr := ib.NewRecordBatch(), sb.NewRecordBatch()
	defer ir.Release()
	defer sr.Release()
	a, b := NewBuilder(Options{SampleSize: 100}), NewBuilder(Options{SampleSize: 100})
	a.Add(ir, 0)
	b.Add(sr, 0)
	pa, pb := a.Profile(), b.Profile()
	if len(pa.Sample) != 100 || len(pb.Sample) != 100 {
		t.Fatalf("samples %d, %d", len(pa.Sample), len(pb.Sample))
	}
	for i := range pa.Sample {
		if pa.Sample[i].Key != pb.Sample[i].Key || pa.Sample[i].Hash != pb.Sample[i].Hash {
			t.Fatalf("sample %d: %+v vs %+v", i, pa.Sample[i], pb.Sample[i])
		}
	}
	if e := Churn(pa, pb); e.Mean != 0 || e.N != 100 {
		t.Fatalf("churn between the same keys: %+v", e)
	}
}

// TestHistograms: a shifted field's shares move up the shared bins, and
// each side's shares sum to 1.
func TestHistograms(t *testing.T) {
	mk := func(from float64) *Field {
		f := newField()
		for i := range 1000 {
			v := from + float64(i)/1000
			f.dd.Add(v)
			f.Values++
			f.Min, f.Max = math.Min(f.Min, v), math.Max(f.Max, v)
		}
		return f
	}
	h := Histograms(mk(1), mk(2), 10)
	if len(h.Edges) != 11 || h.Edges[0] != 1 || math.Abs(h.Edges[10]-2.999) > 1e-9 {
		t.Fatalf("edges %v, want 10 bins over [1, 2.999]", h.Edges)
	}
	var so, sn, low, high float64
	for i := range h.Old {
		so += h.Old[i]
		sn += h.New[i]
		if i < 5 {
			low += h.Old[i] - h.New[i]
		} else {
			high += h.New[i] - h.Old[i]
		}
	}
	if math.Abs(so-1) > 1e-9 || math.Abs(sn-1) > 1e-9 {
		t.Errorf("shares sum to %v and %v, want 1", so, sn)
	}
	if low < 0.95 || high < 0.95 {
		t.Errorf("old %v / new %v: the new values do not sit in the upper bins", h.Old, h.New)
	}
	if h := Histograms(nil, &Field{}, 10); h.Edges != nil {
		t.Errorf("no values: %+v, want no bins", h)
	}
}
