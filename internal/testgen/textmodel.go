package testgen

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/precog-ml/precog/jobs"
)

// TextEmbedder is `text_embedder`, a small transformer-shaped embedding
// model for BertTokenizerJSON's vocabulary: inputs input_ids and
// attention_mask int64 [N,T] → token embedding lookup (Gather) → MatMul +
// bias → Tanh → × mask → `last_hidden_state` float [N,T,D]. Hidden and Pool
// compute the same in pure Go.
type TextEmbedder struct {
	Name  string
	V, E  int // vocabulary size, embedding width
	D     int // hidden width
	emb   []float32
	layer dense
	bpe   bool // its tokenizer is BPETokenizerJSON, else BertTokenizerJSON
}

// NewTextEmbedder returns `text_embedder` with weights from seed.
func NewTextEmbedder(seed uint64) *TextEmbedder { return NewTextEmbedderSized(seed, 16, 8) }

// NewTextEmbedderSized is text_embedder with embedding width e and hidden
// width d, e.g. 384 × 384 for benchmarks with a realistic per-token cost.
func NewTextEmbedderSized(seed uint64, e, d int) *TextEmbedder {
	r := rng(seed, "text_embedder")
	m := &TextEmbedder{Name: "text_embedder", V: len(BertVocab()), E: e, D: d}
	m.emb = make([]float32, m.V*m.E)
	for i := range m.emb {
		m.emb[i] = float32(2*r.Float64() - 1)
	}
	m.layer = newDense(r, m.E, m.D)
	return m
}

// ONNX returns the encoded model.
func (m *TextEmbedder) ONNX() ([]byte, error) {
	g := NewGraph(m.Name)
	nt := []Dim{{Param: "N"}, {Param: "T"}}
	g.inputs = append(g.inputs, valueInfo{"input_ids", Type{Elem: Int64, Dims: nt}}, valueInfo{"attention_mask", Type{Elem: Int64, Dims: nt}})
	g.Initializer("emb", []int64{int64(m.V), int64(m.E)}, m.emb)
	g.Initializer("w", []int64{int64(m.E), int64(m.D)}, m.layer.w)
	g.Initializer("b", []int64{int64(m.D)}, m.layer.b)
	g.InitializerInt64("last_axis", []int64{1}, []int64{-1})
	g.Node("Gather", []string{"emb", "input_ids"}, []string{"tok"}, AttrInt("axis", 0))
	g.Node("MatMul", []string{"tok", "w"}, []string{"mm"})
	g.Node("Add", []string{"mm", "b"}, []string{"pre"})
	g.Node("Tanh", []string{"pre"}, []string{"act"})
	g.Node("Cast", []string{"attention_mask"}, []string{"maskf"}, AttrInt("to", int64(Float)))
	g.Node("Unsqueeze", []string{"maskf", "last_axis"}, []string{"mask3"})
	g.Node("Mul", []string{"act", "mask3"}, []string{"last_hidden_state"})
	g.outputs = append(g.outputs, valueInfo{"last_hidden_state", Type{Elem: Float, Dims: append(nt, Dim{Value: int64(m.D)})}})
	b, err := NewModelProto(g).Marshal()
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	return b, nil
}

// NewTextEmbedderBPE is text_embedder over BPETokenizerJSON's vocabulary.
func NewTextEmbedderBPE(seed uint64) *TextEmbedder {
	raw, err := BPETokenizerJSON()
	if err != nil {
		panic(err) // generated from constants
	}
	var f struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		panic(err)
	}
	m := NewTextEmbedderSized(seed, 16, 8)
	m.V, m.bpe = len(f.Model.Vocab), true
	r := rng(seed, "text_embedder_bpe")
	m.emb = make([]float32, m.V*m.E)
	for i := range m.emb {
		m.emb[i] = float32(2*r.Float64() - 1)
	}
	return m
}

// Write writes the model to dir/text_embedder.onnx and the tokenizer to
// dir/tokenizer.json; it returns the model's path.
func (m *TextEmbedder) Write(dir string) (string, error) {
	b, err := m.ONNX()
	if err != nil {
		return "", err
	}
	writeTok := WriteBertTokenizer
	if m.bpe {
		writeTok = WriteBPETokenizer
	}
	if _, err := writeTok(dir); err != nil {
		return "", err
	}
	path := filepath.Join(dir, m.Name+".onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("model %s: %w", m.Name, err)
	}
	return path, nil
}

// Hidden is the hidden state of each token of one unpadded row, in float64.
func (m *TextEmbedder) Hidden(ids []int32) [][]float64 {
	out := make([][]float64, len(ids))
	for t, id := range ids {
		h := make([]float64, m.D)
		for j := range h {
			acc := float64(m.layer.b[j])
			for i := range m.E {
				acc += float64(m.emb[int(id)*m.E+i]) * float64(m.layer.w[i*m.D+j])
			}
			h[j] = math.Tanh(acc)
		}
		out[t] = h
	}
	return out
}

// Pool is the reference sentence vector of one row's ids: mean, cls or max
// over its tokens, then L2-normalized when l2 is true.
func (m *TextEmbedder) Pool(ids []int32, mode jobs.Pooling, l2 bool) []float64 {
	h := m.Hidden(ids)
	v := make([]float64, m.D)
	switch mode {
	case jobs.PoolingCLS:
		copy(v, h[0])
	case jobs.PoolingMax:
		for j := range v {
			v[j] = math.Inf(-1)
			for _, t := range h {
				v[j] = math.Max(v[j], t[j])
			}
		}
	default:
		for _, t := range h {
			for j, x := range t {
				v[j] += x / float64(len(h))
			}
		}
	}
	if l2 {
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		n := math.Max(math.Sqrt(ss), 1e-12)
		for j := range v {
			v[j] /= n
		}
	}
	return v
}
