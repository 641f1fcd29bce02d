package model

import (
	"cmp"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

// tieModel is a recs-shaped model whose scores tie by construction: 4
// integer features times a weight matrix whose 10 item columns come in
// groups of equal columns (items 0-2, 3-4, 5-6, 7, 8-9), TopK 7 of them,
// and ids mapped from TopK's indices through a constant id table that
// runs backwards (index i is item id 90-10i), as a real model's index ->
// item id Gather does. ONNX Runtime's CPU TopK puts the lower index first
// on ties: the higher id.
func tieModel(t *testing.T) (path string, weights [][]float32, table []int64) {
	t.Helper()
	const in, items, k = 4, 10, 7
	groups := []int{0, 0, 0, 1, 1, 2, 2, 3, 4, 4}
	base := [][]float32{{1, 2, 0, 1}, {2, 0, 1, 1}, {0, 1, 2, 1}, {1, 1, 1, 1}, {2, 1, 0, 2}}
	w := make([]float32, in*items)
	weights = make([][]float32, items)
	table = make([]int64, items)
	for it, g := range groups {
		weights[it] = base[g]
		for i := range in {
			w[i*items+it] = base[g][i]
		}
		table[it] = int64(90 - 10*it)
	}
	g := testgen.NewGraph("ties")
	g.Input("features", testgen.Float, -1, in)
	g.Initializer("w", []int64{in, items}, w)
	g.Initializer("half", nil, []float32{0.5})
	g.InitializerInt64("k", []int64{1}, []int64{k})
	g.InitializerInt64("table", []int64{items}, table)
	g.Node("MatMul", []string{"features", "w"}, []string{"scores"})
	g.Node("TopK", []string{"scores", "k"}, []string{"top", "idx"}, testgen.AttrInt("axis", -1), testgen.AttrInt("largest", 1), testgen.AttrInt("sorted", 1))
	g.Node("Gather", []string{"table", "idx"}, []string{"item_ids"}, testgen.AttrInt("axis", 0))
	g.Node("Mul", []string{"top", "half"}, []string{"item_scores"})
	g.Output("item_ids", testgen.Int64, -1, k)
	g.Output("item_scores", testgen.Float, -1, k)
	b, err := testgen.NewModelProto(g).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "ties.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, weights, table
}

// TestTopKTiesInIDOrder: a model's top-k id list comes back with every run
// of equal scores in ascending id order (what a CUDA TopK, which orders
// ties its own way, then also gives), the scores and the set of ids as the
// model computed them. On the old code the CPU's ties came back in
// descending id order (the id table runs backwards).
func TestTopKTiesInIDOrder(t *testing.T) {
	path, weights, table := tieModel(t)
	m := loadModel(t, jobs.ModelSpec{
		Path:    path,
		Inputs:  map[string]jobs.InputSpec{"features": {Columns: columnNames(4)}},
		Outputs: map[string]string{"item_ids": "ids", "item_scores": "scores"},
	})
	if len(m.ties) != 1 {
		t.Fatalf("tie pairs %+v, want the one TopK's", m.ties)
	}
	const n, k = 300, 7
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, n*4)
	for i := range x {
		x[i] = float32(r.IntN(5) - 1)
	}
	b, out := infer(t, m, columnsRecord(x, n, 4, arrow.PrimitiveTypes.Float32, nil))
	if len(b.Rejects) != 0 {
		t.Fatalf("rejects %v", b.Rejects)
	}
	ids := values(t, out.Column(0))
	scores := values(t, out.Column(1))
	tiedRows := 0
	for row := range n {
		// The model's own choice: scores descending, the lower index first.
		type item struct {
			score float64
			idx   int
		}
		all := make([]item, len(weights))
		for it, w := range weights {
			for i := range 4 {
				all[it].score += float64(x[row*4+i] * w[i])
			}
			all[it].idx = it
		}
		slices.SortStableFunc(all, func(a, b item) int { return cmp.Compare(b.score, a.score) })
		want := make([]item, k)
		copy(want, all[:k])
		// precog's: each run of equal scores by ascending id.
		slices.SortStableFunc(want, func(a, b item) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			return cmp.Compare(table[a.idx], table[b.idx])
		})
		for j, w := range want {
			if scores[row][j] != w.score/2 || int64(ids[row][j]) != table[w.idx] {
				t.Fatalf("row %d: ids %v scores %v; want position %d = id %d score %v", row, ids[row], scores[row], j, table[w.idx], w.score/2)
			}
			if j > 0 && want[j-1].score == w.score {
				tiedRows++
			}
		}
	}
	if tiedRows < n {
		t.Fatalf("only %d tied neighbours in %d rows: the test has too few ties to prove anything", tiedRows, n)
	}
}

// TestTopKTiePairsFound: the recs test model's two outputs are one TopK's
// (scores through a Mul by a constant); a model without TopK has none, and
// a pair is only ordered when both lists are stored.
func TestTopKTiePairsFound(t *testing.T) {
	for _, tc := range []struct {
		model   string
		outputs map[string]string
		pairs   int
	}{
		{"recs", map[string]string{"topk_items": "items", "topk_scores": "scores"}, 1},
		{"recs", map[string]string{"topk_items": "items"}, 0},
		{"heavy", nil, 0},
	} {
		spec := specFor(t, tc.model)
		if tc.outputs != nil {
			spec.Outputs = tc.outputs
		}
		m := loadModel(t, spec)
		if len(m.ties) != tc.pairs {
			t.Errorf("%s %v: %d tie pairs, want %d", tc.model, tc.outputs, len(m.ties), tc.pairs)
		}
	}
}
