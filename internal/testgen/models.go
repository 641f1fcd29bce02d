package testgen

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
)

// DefaultSeed seeds the weights of the models All and Write return, so every
// machine generates byte-identical model files.
const DefaultSeed uint64 = 42

// IO describes one model input or output. Dims are per tensor, -1 for the
// batch dimension. Seq marks a non-tensor output (a sequence of maps) that
// precog must refuse to store.
type IO struct {
	Name string
	Elem ElemType
	Dims []int64
	Seq  bool
	// Classes are a ZipMap output's class labels in map order (its keys:
	// "0", "1" for int64 labels); the map's values are the probabilities
	// output's columns in the same order.
	Classes []string
}

// Tensor is a reference output: Float32 or Int64 holds the row-major data.
type Tensor struct {
	Shape   []int64
	Float32 []float32
	Int64   []int64
}

// Model is one generated test model: its ONNX graph and a pure-Go reference
// implementation computing the same outputs, so tests can derive expected
// predictions without trusting the code under test.
type Model struct {
	Name    string
	Doc     string
	Input   IO
	Outputs []IO

	graph func() *Graph
	ref   func(x []float32, n int) map[string]Tensor
}

// ONNX returns the encoded model.
func (m *Model) ONNX() ([]byte, error) {
	b, err := NewModelProto(m.graph()).Marshal()
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	return b, nil
}

// WriteONNX writes the encoded model to path.
func (m *Model) WriteONNX(path string) error {
	b, err := m.ONNX()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("model %s: write %s: %w", m.Name, path, err)
	}
	return nil
}

// InputWidth is the number of features per row the model takes.
func (m *Model) InputWidth() int { return int(m.Input.Dims[len(m.Input.Dims)-1]) }

// Reference computes the model's tensor outputs for n rows of row-major
// features x (n × InputWidth values) in pure Go. Non-tensor outputs are
// absent from the result. For the typed models x holds the input values
// converted to float32 (exact for the small integers tests use).
func (m *Model) Reference(x []float32, n int) (map[string]Tensor, error) {
	w := m.InputWidth()
	if n < 0 || len(x) != n*w {
		return nil, fmt.Errorf("model %s: reference needs %d rows × %d features = %d values, got %d",
			m.Name, n, w, n*w, len(x))
	}
	return m.ref(x, n), nil
}

// All returns every generated model with DefaultSeed weights: the four main
// models (ranker, embedder, recs, heavy) and the ones for error tests.
func All() []*Model {
	s := DefaultSeed
	return []*Model{
		NewRanker(s), NewEmbedder(s), NewRecs(s), NewHeavy(s),
		NewTyped(s, Double), NewTyped(s, Int32), NewTyped(s, Int64),
		NewClassifierZipMap(s), NewClassifierZipMapStrings(s), NewRankerStatic(s, 8),
	}
}

// Names lists the names of All, in order.
func Names() []string {
	var out []string
	for _, m := range All() {
		out = append(out, m.Name)
	}
	return out
}

// Get returns the model called name with DefaultSeed weights.
func Get(name string) (*Model, error) {
	for _, m := range All() {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("unknown test model %q (have %v)", name, Names())
}

// Write writes model name to dir/name.onnx (creating dir) and returns the path.
func Write(dir, name string) (string, error) {
	m, err := Get(name)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("model %s: %w", name, err)
	}
	path := filepath.Join(dir, name+".onnx")
	return path, m.WriteONNX(path)
}

// rng returns a generator seeded by seed and the model name, so models built
// from the same seed still get unrelated weights.
func rng(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// dense is a fully connected layer y = x·W + b with W stored [in, out].
type dense struct {
	in, out int
	w, b    []float32
}

func newDense(r *rand.Rand, in, out int) dense {
	d := dense{in: in, out: out, w: make([]float32, in*out), b: make([]float32, out)}
	a := math.Sqrt(3.0 / float64(in)) // keeps activations near unit variance
	for i := range d.w {
		d.w[i] = float32((2*r.Float64() - 1) * a)
	}
	for i := range d.b {
		d.b[i] = float32((2*r.Float64() - 1) * 0.1)
	}
	return d
}

// gemm adds the layer to g as a Gemm node reading x; it returns the output name.
func (d dense) gemm(g *Graph, name, x string) string {
	g.Initializer(name+"_w", []int64{int64(d.in), int64(d.out)}, d.w)
	g.Initializer(name+"_b", []int64{int64(d.out)}, d.b)
	g.Node("Gemm", []string{x, name + "_w", name + "_b"}, []string{name})
	return name
}

// apply computes the layer for n rows in float64 and rounds to float32.
func (d dense) apply(x []float32, n int) []float32 {
	y := make([]float32, n*d.out)
	acc := make([]float64, d.out)
	for r := 0; r < n; r++ {
		for j := range acc {
			acc[j] = float64(d.b[j])
		}
		row := x[r*d.in : (r+1)*d.in]
		for i, xi := range row {
			wi := d.w[i*d.out : (i+1)*d.out]
			for j, w := range wi {
				acc[j] += float64(xi) * float64(w)
			}
		}
		for j, v := range acc {
			y[r*d.out+j] = float32(v)
		}
	}
	return y
}

func relu(x []float32) []float32 {
	for i, v := range x {
		if v < 0 {
			x[i] = 0
		}
	}
	return x
}

func sigmoid(x []float32) []float32 {
	for i, v := range x {
		x[i] = float32(1 / (1 + math.Exp(-float64(v))))
	}
	return x
}

// NewRanker is `ranker`: features [N,16] → Gemm 64 → Relu → Gemm 1 → Sigmoid
// → score [N,1]. The everyday scoring model.
func NewRanker(seed uint64) *Model { return newRanker(seed, "ranker", -1) }

// NewRankerStatic is the ranker with a fixed batch dimension (batch rows per
// call), for testing that precog pads or rejects batches of other sizes.
func NewRankerStatic(seed uint64, batch int64) *Model {
	return newRanker(seed, fmt.Sprintf("ranker_static%d", batch), batch)
}

func newRanker(seed uint64, name string, batch int64) *Model {
	r := rng(seed, "ranker")
	l1, l2 := newDense(r, 16, 64), newDense(r, 64, 1)
	return &Model{
		Name:    name,
		Doc:     "features [N,16] → MLP(64) → sigmoid → score [N,1]",
		Input:   IO{Name: "features", Elem: Float, Dims: []int64{batch, 16}},
		Outputs: []IO{{Name: "score", Elem: Float, Dims: []int64{batch, 1}}},
		graph: func() *Graph {
			g := NewGraph(name)
			g.Input("features", Float, batch, 16)
			h := l1.gemm(g, "l1", "features")
			g.Node("Relu", []string{h}, []string{"h1"})
			o := l2.gemm(g, "l2", "h1")
			g.Node("Sigmoid", []string{o}, []string{"score"})
			g.Output("score", Float, batch, 1)
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			y := sigmoid(l2.apply(relu(l1.apply(x, n)), n))
			return map[string]Tensor{"score": {Shape: []int64{int64(n), 1}, Float32: y}}
		},
	}
}

// NewEmbedder is `embedder`: features [N,32] → Gemm 128 → Relu → Gemm 64 →
// L2-normalised → embedding [N,64]. The list-output model.
func NewEmbedder(seed uint64) *Model {
	r := rng(seed, "embedder")
	l1, l2 := newDense(r, 32, 128), newDense(r, 128, 64)
	const eps = 1e-12
	return &Model{
		Name:    "embedder",
		Doc:     "features [N,32] → MLP(128) → 64 → L2 normalise → embedding [N,64]",
		Input:   IO{Name: "features", Elem: Float, Dims: []int64{-1, 32}},
		Outputs: []IO{{Name: "embedding", Elem: Float, Dims: []int64{-1, 64}}},
		graph: func() *Graph {
			g := NewGraph("embedder")
			g.Input("features", Float, -1, 32)
			h := l1.gemm(g, "l1", "features")
			g.Node("Relu", []string{h}, []string{"h1"})
			e := l2.gemm(g, "l2", "h1")
			g.Node("ReduceL2", []string{e}, []string{"norm"}, AttrInts("axes", 1), AttrInt("keepdims", 1))
			g.Initializer("eps", nil, []float32{eps})
			g.Node("Max", []string{"norm", "eps"}, []string{"norm_safe"})
			g.Node("Div", []string{e, "norm_safe"}, []string{"embedding"})
			g.Output("embedding", Float, -1, 64)
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			e := l2.apply(relu(l1.apply(x, n)), n)
			for r := 0; r < n; r++ {
				row := e[r*64 : (r+1)*64]
				var ss float64
				for _, v := range row {
					ss += float64(v) * float64(v)
				}
				norm := math.Max(math.Sqrt(ss), eps)
				for i, v := range row {
					row[i] = float32(float64(v) / norm)
				}
			}
			return map[string]Tensor{"embedding": {Shape: []int64{int64(n), 64}, Float32: e}}
		},
	}
}

// Recs dimensions: 5000 items, 50 recommendations per user.
const (
	RecsItems = 5000
	RecsK     = 50
)

// NewRecs is `recs`: features [N,16] → user vector [N,64] → MatMul with an
// item table [64,5000] → TopK(50) → topk_items int64 [N,50] and topk_scores
// float32 [N,50].
//
// Item ids must match the reference exactly, and with ordinary float weights
// two near-equal scores can swap under a different summation order. So the
// model works on integers carried in float32: features are quantised to
// round(16·x) clipped to [-16,16], weights are small integers, the user vector
// is clipped to [0,1023]; every product and partial sum stays below 2^24 (and
// below 2^11 where TF32 matters), making each score exact in any order. Equal
// scores are then real ties, which TopK (and the reference) break by the lower
// item index. Scores are reported divided by 1024 (exact).
func NewRecs(seed uint64) *Model {
	r := rng(seed, "recs")
	const in, hid = 16, 64
	w1 := make([]float32, in*hid)
	b1 := make([]float32, hid)
	items := make([]float32, hid*RecsItems)
	for i := range w1 {
		w1[i] = float32(r.IntN(17) - 8)
	}
	for i := range b1 {
		b1[i] = float32(r.IntN(129) - 64)
	}
	for i := range items {
		items[i] = float32(r.IntN(17) - 8)
	}
	return &Model{
		Name:  "recs",
		Doc:   "features [N,16] → user [N,64] → ·items[64,5000] → TopK 50 → topk_items, topk_scores",
		Input: IO{Name: "features", Elem: Float, Dims: []int64{-1, in}},
		Outputs: []IO{
			{Name: "topk_items", Elem: Int64, Dims: []int64{-1, RecsK}},
			{Name: "topk_scores", Elem: Float, Dims: []int64{-1, RecsK}},
		},
		graph: func() *Graph {
			g := NewGraph("recs")
			g.Input("features", Float, -1, in)
			g.Initializer("sixteen", nil, []float32{16})
			g.Initializer("qmin", nil, []float32{-16})
			g.Initializer("qmax", nil, []float32{16})
			g.Initializer("zero", nil, []float32{0})
			g.Initializer("umax", nil, []float32{1023})
			g.Initializer("scale", nil, []float32{1.0 / 1024})
			g.Initializer("w1", []int64{in, hid}, w1)
			g.Initializer("b1", []int64{hid}, b1)
			g.Initializer("items", []int64{hid, RecsItems}, items)
			g.InitializerInt64("k", []int64{1}, []int64{RecsK})
			g.Node("Mul", []string{"features", "sixteen"}, []string{"x16"})
			g.Node("Round", []string{"x16"}, []string{"xr"})
			g.Node("Clip", []string{"xr", "qmin", "qmax"}, []string{"q"})
			g.Node("MatMul", []string{"q", "w1"}, []string{"u0"})
			g.Node("Add", []string{"u0", "b1"}, []string{"u1"})
			g.Node("Clip", []string{"u1", "zero", "umax"}, []string{"user"})
			g.Node("MatMul", []string{"user", "items"}, []string{"scores"})
			g.Node("TopK", []string{"scores", "k"}, []string{"top_raw", "topk_items"},
				AttrInt("axis", -1), AttrInt("largest", 1), AttrInt("sorted", 1))
			g.Node("Mul", []string{"top_raw", "scale"}, []string{"topk_scores"})
			g.Output("topk_items", Int64, -1, RecsK)
			g.Output("topk_scores", Float, -1, RecsK)
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			ids := make([]int64, 0, n*RecsK)
			scores := make([]float32, 0, n*RecsK)
			user := make([]float64, hid)
			all := make([]float64, RecsItems)
			order := make([]int, RecsItems)
			for row := 0; row < n; row++ {
				for j := range user {
					user[j] = float64(b1[j])
				}
				for i, v := range x[row*in : (row+1)*in] {
					q := math.Max(-16, math.Min(16, math.RoundToEven(float64(v*16))))
					for j := range user {
						user[j] += q * float64(w1[i*hid+j])
					}
				}
				for j, u := range user {
					user[j] = math.Max(0, math.Min(1023, u))
				}
				for it := range all {
					all[it] = 0
				}
				for j, u := range user {
					if u == 0 {
						continue
					}
					wj := items[j*RecsItems : (j+1)*RecsItems]
					for it, w := range wj {
						all[it] += u * float64(w)
					}
				}
				for i := range order {
					order[i] = i
				}
				slices.SortFunc(order, func(a, b int) int {
					switch {
					case all[a] > all[b]:
						return -1
					case all[a] < all[b]:
						return 1
					}
					return a - b
				})
				for _, it := range order[:RecsK] {
					ids = append(ids, int64(it))
					scores = append(scores, float32(all[it]/1024))
				}
			}
			shape := []int64{int64(n), RecsK}
			return map[string]Tensor{
				"topk_items":  {Shape: shape, Int64: ids},
				"topk_scores": {Shape: slices.Clone(shape), Float32: scores},
			}
		},
	}
}

// Heavy layer width.
const heavyWidth = 1024

// NewHeavy is `heavy`: features [N,16] → 1024 → 1024 → 1024 → score [N,1],
// ReLU between layers: about 2.1M multiply-adds per row, so inference, not
// I/O, dominates a run. For benchmarks.
func NewHeavy(seed uint64) *Model {
	r := rng(seed, "heavy")
	layers := []dense{
		newDense(r, 16, heavyWidth), newDense(r, heavyWidth, heavyWidth),
		newDense(r, heavyWidth, heavyWidth), newDense(r, heavyWidth, 1),
	}
	return &Model{
		Name:    "heavy",
		Doc:     "features [N,16] → 1024 → 1024 → 1024 → score [N,1] (benchmarks)",
		Input:   IO{Name: "features", Elem: Float, Dims: []int64{-1, 16}},
		Outputs: []IO{{Name: "score", Elem: Float, Dims: []int64{-1, 1}}},
		graph: func() *Graph {
			g := NewGraph("heavy")
			g.Input("features", Float, -1, 16)
			x := "features"
			for i, l := range layers {
				y := l.gemm(g, fmt.Sprintf("l%d", i+1), x)
				if i == len(layers)-1 {
					g.Node("Identity", []string{y}, []string{"score"})
					break
				}
				x = fmt.Sprintf("h%d", i+1)
				g.Node("Relu", []string{y}, []string{x})
			}
			g.Output("score", Float, -1, 1)
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			for i, l := range layers {
				x = l.apply(x, n)
				if i < len(layers)-1 {
					x = relu(x)
				}
			}
			return map[string]Tensor{"score": {Shape: []int64{int64(n), 1}, Float32: x}}
		},
	}
}

// typedNames maps the element types NewTyped supports to model names.
var typedNames = map[ElemType]string{Double: "typed_float64", Int32: "typed_int32", Int64: "typed_int64"}

// NewTyped is `typed_float64`, `typed_int32` or `typed_int64`: an input
// `features` [N,4] of that element type → Cast to float → Gemm → score
// [N,1], for testing input element-type conversion. Other element types
// fall back to float64.
func NewTyped(seed uint64, elem ElemType) *Model {
	name, ok := typedNames[elem]
	if !ok {
		elem, name = Double, typedNames[Double]
	}
	l := newDense(rng(seed, name), 4, 1)
	return &Model{
		Name:    name,
		Doc:     "features [N,4] (non-float32) → Cast → Gemm → score [N,1]",
		Input:   IO{Name: "features", Elem: elem, Dims: []int64{-1, 4}},
		Outputs: []IO{{Name: "score", Elem: Float, Dims: []int64{-1, 1}}},
		graph: func() *Graph {
			g := NewGraph(name)
			g.Input("features", elem, -1, 4)
			g.Node("Cast", []string{"features"}, []string{"xf"}, AttrInt("to", int64(Float)))
			y := l.gemm(g, "l1", "xf")
			g.Node("Identity", []string{y}, []string{"score"})
			g.Output("score", Float, -1, 1)
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			return map[string]Tensor{"score": {Shape: []int64{int64(n), 1}, Float32: l.apply(x, n)}}
		},
	}
}

// NewClassifierZipMap is `classifier_zipmap`, shaped like an sklearn export:
// features [N,4] → Gemm 2 → Softmax → `probabilities` float [N,2], ArgMax →
// `label` int64 [N], and ZipMap → `output_probability`, a sequence of maps
// from class label to probability (stored as a map field).
func NewClassifierZipMap(seed uint64) *Model {
	return newClassifierZipMap(seed, "classifier_zipmap", nil)
}

// NewClassifierZipMapStrings is `classifier_zipmap_str`: the same graph
// shape as classifier_zipmap with string class labels ("neg", "pos"), so
// output_probability is a sequence<map<string,float32>>.
func NewClassifierZipMapStrings(seed uint64) *Model {
	return newClassifierZipMap(seed, "classifier_zipmap_str", []string{"neg", "pos"})
}

// newClassifierZipMap builds a ZipMap classifier; labels nil means int64
// class labels 0 and 1.
func newClassifierZipMap(seed uint64, name string, labels []string) *Model {
	l := newDense(rng(seed, name), 4, 2)
	keyElem, classes, keyName := Int64, []string{"0", "1"}, "int64"
	zipAttr := AttrInts("classlabels_int64s", 0, 1)
	if labels != nil {
		keyElem, classes, keyName = String, labels, "string"
		zipAttr = AttrStrings("classlabels_strings", labels...)
	}
	return &Model{
		Name:  name,
		Doc:   "features [N,4] → label int64 [N], probabilities [N,2], output_probability seq(map(" + keyName + ",float))",
		Input: IO{Name: "features", Elem: Float, Dims: []int64{-1, 4}},
		Outputs: []IO{
			{Name: "label", Elem: Int64, Dims: []int64{-1}},
			{Name: "probabilities", Elem: Float, Dims: []int64{-1, 2}},
			{Name: "output_probability", Seq: true, Classes: classes},
		},
		graph: func() *Graph {
			g := NewGraph(name)
			g.Input("features", Float, -1, 4)
			y := l.gemm(g, "l1", "features")
			g.Node("Softmax", []string{y}, []string{"probabilities"}, AttrInt("axis", 1))
			g.Node("ArgMax", []string{"probabilities"}, []string{"label"}, AttrInt("axis", 1), AttrInt("keepdims", 0))
			g.NodeDomain(MLDomain, "ZipMap", []string{"probabilities"}, []string{"output_probability"}, zipAttr)
			g.Output("label", Int64, -1)
			g.Output("probabilities", Float, -1, 2)
			g.OutputTyped("output_probability", SeqType(MapType(keyElem, Type{Elem: Float})))
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			logits := l.apply(x, n)
			labels := make([]int64, n)
			for r := 0; r < n; r++ {
				a, b := float64(logits[2*r]), float64(logits[2*r+1])
				m := math.Max(a, b)
				ea, eb := math.Exp(a-m), math.Exp(b-m)
				logits[2*r], logits[2*r+1] = float32(ea/(ea+eb)), float32(eb/(ea+eb))
				if logits[2*r+1] > logits[2*r] {
					labels[r] = 1
				}
			}
			return map[string]Tensor{
				"label":         {Shape: []int64{int64(n)}, Int64: labels},
				"probabilities": {Shape: []int64{int64(n), 2}, Float32: logits},
			}
		},
	}
}
