// Package testgen generates the ONNX models and Parquet datasets that precog's
// tests, demo and benchmarks run against. Everything is produced by Go code
// from a seed, so no binary fixtures live in the repository and every expected
// output can be recomputed in pure Go (see Model.Reference and Features).
package testgen

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"google.golang.org/protobuf/encoding/protowire"
)

// ElemType is an ONNX TensorProto.DataType value.
type ElemType int32

// The ONNX element types the generated models use.
const (
	Float  ElemType = 1
	Int32  ElemType = 6
	Int64  ElemType = 7
	String ElemType = 8
	Double ElemType = 11
)

// Opset versions the generated models import. 17 is old enough for every
// ONNX Runtime release precog supports and new enough for the ops we use.
const (
	DefaultOpset = 17
	MLDomain     = "ai.onnx.ml"
	MLOpset      = 3
	irVersion    = 8
)

// Dim is one dimension of a declared shape: a fixed Value, or a symbolic Param
// (the batch dimension, "N") when Param is set.
type Dim struct {
	Value int64
	Param string
}

// Dims converts the shorthand used by the builder: -1 means the symbolic batch
// dimension "N", anything else is a fixed size.
func Dims(d ...int64) []Dim {
	out := make([]Dim, len(d))
	for i, v := range d {
		if v < 0 {
			out[i] = Dim{Param: "N"}
		} else {
			out[i] = Dim{Value: v}
		}
	}
	return out
}

// Type is an ONNX TypeProto: a tensor (Elem + Dims), a sequence (Seq), or a
// map (MapKey → MapValue). Only what the test models need is supported.
type Type struct {
	Elem     ElemType
	Dims     []Dim // nil: unknown rank
	Seq      *Type
	MapKey   ElemType
	MapValue *Type
}

// TensorType is a tensor type with the shorthand dims of Dims.
func TensorType(elem ElemType, dims ...int64) Type {
	return Type{Elem: elem, Dims: Dims(dims...)}
}

// SeqType is a sequence of elem.
func SeqType(elem Type) Type { return Type{Seq: &elem} }

// MapType is a map from a key element type to value.
func MapType(key ElemType, value Type) Type { return Type{MapKey: key, MapValue: &value} }

// Attr is one node attribute. Build it with the Attr* constructors.
type Attr struct {
	name    string
	kind    int32 // AttributeProto.AttributeType
	f       float32
	i       int64
	s       []byte
	t       *tensor
	ints    []int64
	floats  []float32
	strings [][]byte
}

// AttrFloat is a FLOAT attribute.
func AttrFloat(name string, v float32) Attr { return Attr{name: name, kind: 1, f: v} }

// AttrInt is an INT attribute.
func AttrInt(name string, v int64) Attr { return Attr{name: name, kind: 2, i: v} }

// AttrString is a STRING attribute.
func AttrString(name, v string) Attr { return Attr{name: name, kind: 3, s: []byte(v)} }

// AttrFloats is a FLOATS attribute.
func AttrFloats(name string, v ...float32) Attr { return Attr{name: name, kind: 6, floats: v} }

// AttrInts is an INTS attribute.
func AttrInts(name string, v ...int64) Attr { return Attr{name: name, kind: 7, ints: v} }

// AttrStrings is a STRINGS attribute.
func AttrStrings(name string, v ...string) Attr {
	b := make([][]byte, len(v))
	for i, s := range v {
		b[i] = []byte(s)
	}
	return Attr{name: name, kind: 8, strings: b}
}

// AttrTensorFloat is a TENSOR attribute holding float32 data, e.g. for
// Constant nodes.
func AttrTensorFloat(name string, dims []int64, data []float32) Attr {
	return Attr{name: name, kind: 4, t: floatTensor("", dims, data)}
}

type tensor struct {
	name  string
	elem  ElemType
	dims  []int64
	raw   []byte
	count int64
}

func floatTensor(name string, dims []int64, data []float32) *tensor {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &tensor{name: name, elem: Float, dims: dims, raw: raw, count: int64(len(data))}
}

func int64Tensor(name string, dims []int64, data []int64) *tensor {
	raw := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	return &tensor{name: name, elem: Int64, dims: dims, raw: raw, count: int64(len(data))}
}

type valueInfo struct {
	name string
	typ  Type
}

type node struct {
	op, name, domain string
	inputs, outputs  []string
	attrs            []Attr
}

// Graph builds an ONNX GraphProto. Builder mistakes (a data length that does
// not match the dims) are recorded and reported by Model.Marshal, so model
// definitions read as straight-line code.
type Graph struct {
	name    string
	nodes   []node
	inits   []*tensor
	inputs  []valueInfo
	outputs []valueInfo
	err     error
}

// NewGraph starts an empty graph.
func NewGraph(name string) *Graph { return &Graph{name: name} }

// Input declares a graph input; dims use the Dims shorthand (-1 = batch "N").
func (g *Graph) Input(name string, elem ElemType, dims ...int64) {
	g.inputs = append(g.inputs, valueInfo{name, TensorType(elem, dims...)})
}

// Output declares a tensor graph output; dims use the Dims shorthand.
func (g *Graph) Output(name string, elem ElemType, dims ...int64) {
	g.outputs = append(g.outputs, valueInfo{name, TensorType(elem, dims...)})
}

// OutputTyped declares a graph output of any Type (sequences, maps).
func (g *Graph) OutputTyped(name string, t Type) {
	g.outputs = append(g.outputs, valueInfo{name, t})
}

func (g *Graph) checkLen(name string, dims []int64, n int) {
	want := int64(1)
	for _, d := range dims {
		want *= d
	}
	if want != int64(n) && g.err == nil {
		g.err = fmt.Errorf("initializer %q: dims %v hold %d values, got %d", name, dims, want, n)
	}
}

// Initializer adds a float32 constant tensor.
func (g *Graph) Initializer(name string, dims []int64, data []float32) {
	g.checkLen(name, dims, len(data))
	g.inits = append(g.inits, floatTensor(name, dims, data))
}

// InitializerInt64 adds an int64 constant tensor (shapes, K of TopK, axes).
func (g *Graph) InitializerInt64(name string, dims []int64, data []int64) {
	g.checkLen(name, dims, len(data))
	g.inits = append(g.inits, int64Tensor(name, dims, data))
}

// Node appends a node of the default ONNX domain. Nodes must be added in
// topological order.
func (g *Graph) Node(op string, inputs, outputs []string, attrs ...Attr) {
	g.NodeDomain("", op, inputs, outputs, attrs...)
}

// NodeDomain appends a node of an operator domain such as MLDomain.
func (g *Graph) NodeDomain(domain, op string, inputs, outputs []string, attrs ...Attr) {
	g.nodes = append(g.nodes, node{
		op: op, domain: domain, inputs: inputs, outputs: outputs, attrs: attrs,
		name: fmt.Sprintf("%s_%d", op, len(g.nodes)),
	})
}

// ModelProto is a graph wrapped with the IR version, producer and opset
// imports: what an .onnx file holds.
type ModelProto struct {
	Graph    *Graph
	Producer string
}

// NewModelProto wraps g for serialisation.
func NewModelProto(g *Graph) *ModelProto { return &ModelProto{Graph: g, Producer: "precog-testgen"} }

// Marshal encodes the model as ONNX protobuf bytes. It fails only on builder
// mistakes recorded in the graph.
func (m *ModelProto) Marshal() ([]byte, error) {
	g := m.Graph
	if g.err != nil {
		return nil, fmt.Errorf("graph %q: %w", g.name, g.err)
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType) // ir_version
	b = protowire.AppendVarint(b, irVersion)
	b = appendString(b, 2, m.Producer) // producer_name
	b = appendMessage(b, 7, marshalGraph(g))
	b = appendMessage(b, 8, marshalOpset("", DefaultOpset))
	for _, n := range g.nodes {
		if n.domain == MLDomain {
			b = appendMessage(b, 8, marshalOpset(MLDomain, MLOpset))
			break
		}
	}
	return b, nil
}

// WriteFile writes the encoded model to path.
func (m *ModelProto) WriteFile(path string) error {
	b, err := m.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write model %s: %w", path, err)
	}
	return nil
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendVarintField(b []byte, num protowire.Number, v int64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func marshalOpset(domain string, version int64) []byte {
	var b []byte
	if domain != "" {
		b = appendString(b, 1, domain)
	}
	return appendVarintField(b, 2, version)
}

func marshalGraph(g *Graph) []byte {
	var b []byte
	for _, n := range g.nodes {
		b = appendMessage(b, 1, marshalNode(n))
	}
	b = appendString(b, 2, g.name)
	for _, t := range g.inits {
		b = appendMessage(b, 5, marshalTensor(t))
	}
	for _, v := range g.inputs {
		b = appendMessage(b, 11, marshalValueInfo(v))
	}
	for _, v := range g.outputs {
		b = appendMessage(b, 12, marshalValueInfo(v))
	}
	return b
}

func marshalNode(n node) []byte {
	var b []byte
	for _, in := range n.inputs {
		b = appendString(b, 1, in)
	}
	for _, out := range n.outputs {
		b = appendString(b, 2, out)
	}
	b = appendString(b, 3, n.name)
	b = appendString(b, 4, n.op)
	for _, a := range n.attrs {
		b = appendMessage(b, 5, marshalAttr(a))
	}
	if n.domain != "" {
		b = appendString(b, 7, n.domain)
	}
	return b
}

func marshalTensor(t *tensor) []byte {
	var b []byte
	for _, d := range t.dims {
		b = appendVarintField(b, 1, d)
	}
	b = appendVarintField(b, 2, int64(t.elem))
	if t.name != "" {
		b = appendString(b, 8, t.name)
	}
	b = protowire.AppendTag(b, 9, protowire.BytesType) // raw_data
	return protowire.AppendBytes(b, t.raw)
}

func marshalAttr(a Attr) []byte {
	var b []byte
	b = appendString(b, 1, a.name)
	switch a.kind {
	case 1:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.f))
	case 2:
		b = appendVarintField(b, 3, a.i)
	case 3:
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, a.s)
	case 4:
		b = appendMessage(b, 5, marshalTensor(a.t))
	case 6:
		for _, f := range a.floats {
			b = protowire.AppendTag(b, 7, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, math.Float32bits(f))
		}
	case 7:
		for _, i := range a.ints {
			b = appendVarintField(b, 8, i)
		}
	case 8:
		for _, s := range a.strings {
			b = protowire.AppendTag(b, 9, protowire.BytesType)
			b = protowire.AppendBytes(b, s)
		}
	}
	return appendVarintField(b, 20, int64(a.kind))
}

func marshalValueInfo(v valueInfo) []byte {
	var b []byte
	b = appendString(b, 1, v.name)
	return appendMessage(b, 2, marshalType(v.typ))
}

func marshalType(t Type) []byte {
	switch {
	case t.Seq != nil:
		// TypeProto.sequence_type = 4 → Sequence.elem_type = 1.
		return appendMessage(nil, 4, appendMessage(nil, 1, marshalType(*t.Seq)))
	case t.MapValue != nil:
		// TypeProto.map_type = 5 → Map{key_type = 1, value_type = 2}.
		m := appendVarintField(nil, 1, int64(t.MapKey))
		m = appendMessage(m, 2, marshalType(*t.MapValue))
		return appendMessage(nil, 5, m)
	}
	// TypeProto.tensor_type = 1 → Tensor{elem_type = 1, shape = 2}.
	tt := appendVarintField(nil, 1, int64(t.Elem))
	if t.Dims != nil {
		var shape []byte
		for _, d := range t.Dims {
			var dim []byte
			if d.Param != "" {
				dim = appendString(nil, 2, d.Param)
			} else {
				dim = appendVarintField(nil, 1, d.Value)
			}
			shape = appendMessage(shape, 1, dim)
		}
		tt = appendMessage(tt, 2, shape)
	}
	return appendMessage(nil, 1, tt)
}
