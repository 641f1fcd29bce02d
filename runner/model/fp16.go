package model

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// model.precision: fp16. At load the graph is rewritten the way
// onnxconverter-common's float16 converter does it, with protowire like
// the pooling in graphpool.go: float32 initializers and constants become
// float16, every float32 graph input is cast to float16 where it enters
// and every float32 graph output cast back where it leaves (so precog
// feeds and stores the same types as with fp32), Casts to float32 inside
// the graph cast to float16 instead, and the ops of fp16Blocked keep
// computing in float32 between casts. ONNX Runtime's CPU provider runs the
// result too (it casts around the kernels it lacks in float16), which is
// how the tests check it without a GPU.
//
// To know which values are float32 the converter follows element types
// from the graph's inputs and initializers through every node (fp16Types);
// an operator it has no rule for, a subgraph (If, Loop, Scan) or external
// weights make Load fail with a clear error instead of a broken graph.

// fp16Suffix names the values the rewrite adds.
const fp16Suffix = "/precog_fp16"

// fp16Blocked are the ops that stay float32: onnxconverter-common's
// DEFAULT_OP_BLOCK_LIST (ops without float16 kernels or that lose too much
// in it) and the normalizations and accumulations whose sums overflow or
// round away in float16. Every ai.onnx.ml op is blocked too.
var fp16Blocked = map[string]bool{
	"NonMaxSuppression": true, "TopK": true, "RoiAlign": true, "Resize": true, "Range": true,
	"CumSum": true, "Min": true, "Max": true, "Upsample": true, "RandomUniformLike": true,
	"LayerNormalization": true, "Softmax": true, "LogSoftmax": true, "InstanceNormalization": true,
	"ReduceMean": true, "ReduceSum": true, "ReduceSumSquare": true, "ReduceL1": true, "ReduceL2": true,
	"ReduceLogSum": true, "ReduceLogSumExp": true, "ReduceProd": true,
}

// typeLikeInput0 are the default-domain ops whose outputs have their first
// input's element type.
var typeLikeInput0 = map[string]bool{}

func init() {
	for _, op := range []string{
		"Identity", "Add", "Sub", "Mul", "Div", "Pow", "Mod", "MatMul", "Gemm", "Einsum",
		"Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "Mish", "HardSigmoid", "HardSwish",
		"ThresholdedRelu", "Shrink", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Hardmax", "Softplus", "Softsign",
		"Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign",
		"Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Clip", "Max", "Min", "Sum", "Mean",
		"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather",
		"GatherElements", "GatherND", "ScatterElements", "ScatterND", "Expand", "Tile", "Pad", "Trilu",
		"DepthToSpace", "SpaceToDepth", "ReverseSequence", "Compress", "Resize", "Upsample", "CumSum",
		"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
		"ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "LayerNormalization", "BatchNormalization",
		"InstanceNormalization", "LpNormalization", "MeanVarianceNormalization", "Conv", "ConvTranspose",
		"AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "RoiAlign", "RandomUniformLike",
		"RandomNormalLike",
	} {
		typeLikeInput0[op] = true
	}
}

// fp16Types follows element types through the nodes, which ONNX keeps in
// topological order. A value of unknown type (an ai.onnx.ml op's output)
// is onnxUnknown.
func fp16Types(nodes []fp16Node, types map[string]int32) error {
	for _, n := range nodes {
		in := func(i int) int32 {
			if i < len(n.in) {
				return types[n.in[i]]
			}
			return onnxUnknown
		}
		out := make([]int32, len(n.out))
		switch {
		case n.domain != "" && n.domain != "ai.onnx":
			if n.domain != "ai.onnx.ml" {
				return fmt.Errorf("operator %s.%s (node %q) is not one the float16 conversion knows", n.domain, n.op, n.name)
			}
			// Unknown: nothing may use these as float16.
		case n.op == "Cast":
			out[0] = int32(n.ints["to"])
		case n.op == "CastLike":
			out[0] = in(1)
		case n.op == "Where":
			out[0] = in(1)
		case n.op == "OneHot":
			out[0] = in(2)
		case n.op == "Range":
			out[0] = in(0)
		case n.op == "Constant" || n.op == "ConstantOfShape":
			out[0] = onnxFloat // ConstantOfShape's default value
			if t, ok := n.tensors["value"]; ok {
				out[0] = tensorType(t)
			} else if n.op == "Constant" {
				return fmt.Errorf("node %q (Constant): only a value tensor converts to float16 (not value_float(s) or the others)", n.name)
			}
		case n.op == "Shape" || n.op == "Size" || n.op == "ArgMax" || n.op == "ArgMin" || n.op == "NonZero":
			out[0] = onnxInt64
		case boolOps[n.op]:
			out[0] = onnxBool
		case n.op == "TopK":
			out[0] = in(0)
			if len(out) > 1 {
				out[1] = onnxInt64
			}
		case n.op == "Dropout":
			out[0] = in(0)
			if len(out) > 1 {
				out[1] = onnxBool
			}
		case n.op == "MaxPool":
			out[0] = in(0)
			if len(out) > 1 {
				out[1] = onnxInt64
			}
		case typeLikeInput0[n.op]:
			for i := range out {
				out[i] = in(0)
			}
		default:
			return fmt.Errorf("operator %s (node %q) is not one the float16 conversion knows", n.op, n.name)
		}
		for i, o := range n.out {
			if o != "" {
				types[o] = out[i]
			}
		}
	}
	return nil
}

var boolOps = map[string]bool{
	"Equal": true, "Less": true, "LessOrEqual": true, "Greater": true, "GreaterOrEqual": true,
	"Not": true, "And": true, "Or": true, "Xor": true, "IsNaN": true, "IsInf": true,
}

// fp16Node is a node with its raw bytes, for re-encoding.
type fp16Node struct {
	graphNode
	name, domain string
	tensors      map[string][]byte // tensor attributes
	graphs       []string          // names of subgraph attributes
	raw          []byte
}

// fp16Parts is a GraphProto taken apart for the rewrite.
type fp16Parts struct {
	nodes                  []fp16Node
	inits, inputs, outputs [][]byte
	rest                   []byte // other graph fields, copied as they are
	types                  map[string]int32
	initNames              map[string]bool
	floatInputs, floatOuts []string
}

// toFloat16 returns the model data rewritten for precision: fp16.
func toFloat16(data []byte) ([]byte, error) {
	_, graph, err := modelOpsetAndGraph(data)
	if err != nil {
		return nil, err
	}
	p, err := splitGraph(graph)
	if err != nil {
		return nil, err
	}
	if err := p.seedTypes(); err != nil {
		return nil, err
	}
	if err := fp16Types(p.nodes, p.types); err != nil {
		return nil, err
	}
	g := &fp16Graph{types: p.types, rename: map[string]string{}}
	keep32, err := g.initializers(p)
	if err != nil {
		return nil, err
	}
	for _, in := range p.floatInputs {
		g.rename[in] = in + fp16Suffix
		g.cast(in, in+fp16Suffix, onnxFloat16)
	}
	for _, out := range p.floatOuts {
		g.rename[out] = out + fp16Suffix
	}
	for i := range p.nodes {
		if err := g.node(&p.nodes[i], keep32, i); err != nil {
			return nil, err
		}
	}
	for _, out := range p.floatOuts {
		g.cast(out+fp16Suffix, out, onnxFloat)
	}
	b := slices.Concat(p.rest, g.nodes, g.inits)
	for _, raw := range p.inputs {
		b = appendMsg(b, fGraphInput, raw)
	}
	for _, raw := range p.outputs {
		b = appendMsg(b, fGraphOutput, raw)
	}
	return replaceGraph(data, b), nil
}

// splitGraph takes a GraphProto apart; its value_info is dropped (its
// float types no longer hold; ONNX Runtime infers shapes again).
func splitGraph(graph []byte) (*fp16Parts, error) {
	p := &fp16Parts{types: map[string]int32{}, initNames: map[string]bool{}}
	err := walk(graph, func(f field) error {
		if f.typ != protowire.BytesType {
			p.rest = appendField(p.rest, f)
			return nil
		}
		switch f.num {
		case fGraphNode:
			n, err := parseFP16Node(f.data)
			if err != nil {
				return err
			}
			p.nodes = append(p.nodes, n)
		case fGraphInitializer:
			p.inits = append(p.inits, f.data)
		case fGraphInput:
			p.inputs = append(p.inputs, f.data)
		case fGraphOutput:
			p.outputs = append(p.outputs, f.data)
		case fGraphValueInfo:
		default:
			p.rest = appendField(p.rest, f)
		}
		return nil
	})
	return p, err
}

// seedTypes records the initializers' and inputs' element types and the
// float32 inputs and outputs to cast. An IR<4 initializer listed as an
// input is dropped from the inputs: precog never feeds it.
func (p *fp16Parts) seedTypes() error {
	for _, t := range p.inits {
		name, typ, err := tensorNameType(t)
		if err != nil {
			return err
		}
		p.initNames[name] = true
		p.types[name] = typ
	}
	kept := p.inputs[:0]
	for _, raw := range p.inputs {
		ti, err := parseValueInfo(raw)
		if err != nil {
			return err
		}
		if p.initNames[ti.Name] {
			continue
		}
		kept = append(kept, raw)
		p.types[ti.Name] = typeNumber(ti.Type)
		if ti.Type == "float32" {
			p.floatInputs = append(p.floatInputs, ti.Name)
		}
	}
	p.inputs = kept
	for _, raw := range p.outputs {
		ti, err := parseValueInfo(raw)
		if err != nil {
			return err
		}
		if ti.Type == "float32" && !p.initNames[ti.Name] && !slices.Contains(p.floatInputs, ti.Name) {
			p.floatOuts = append(p.floatOuts, ti.Name)
		}
	}
	return nil
}

// initializers converts the float32 initializers to float16, except those
// only blocked ops read, which stay float32 (returned).
func (g *fp16Graph) initializers(p *fp16Parts) (keep32 map[string]bool, err error) {
	blockedOnly := map[string]bool{}
	for _, n := range p.nodes {
		for _, in := range n.in {
			if _, seen := blockedOnly[in]; !seen {
				blockedOnly[in] = true
			}
			blockedOnly[in] = blockedOnly[in] && n.blocked()
		}
	}
	keep32 = map[string]bool{}
	for _, t := range p.inits {
		name, typ, _ := tensorNameType(t)
		if typ == onnxFloat && blockedOnly[name] {
			keep32[name] = true
			g.inits = appendMsg(g.inits, fGraphInitializer, t)
			continue
		}
		c, err := tensorToFP16(t)
		if err != nil {
			return nil, fmt.Errorf("initializer %q: %w", name, err)
		}
		g.inits = appendMsg(g.inits, fGraphInitializer, c)
	}
	return keep32, nil
}

func (n *fp16Node) blocked() bool {
	return fp16Blocked[n.op] || n.domain == "ai.onnx.ml"
}

// fp16Graph accumulates the rewritten nodes and initializers.
type fp16Graph struct {
	types  map[string]int32
	rename map[string]string // graph inputs and outputs: their float16 names inside
	nodes  []byte
	inits  []byte
	n      int
}

func (g *fp16Graph) name(v string) string {
	if r := g.rename[v]; r != "" {
		return r
	}
	return v
}

// cast appends a Cast node from -> to of element type elem.
func (g *fp16Graph) cast(from, to string, elem int64) {
	g.n++
	var b []byte
	b = appendStr(b, fNodeInput, from)
	b = appendStr(b, fNodeOutput, to)
	b = appendStr(b, fNodeName, fmt.Sprintf("precog_fp16/Cast_%d", g.n))
	b = appendStr(b, fNodeOpType, "Cast")
	b = appendMsg(b, fNodeAttr, attrI("to", elem))
	g.nodes = appendMsg(g.nodes, fGraphNode, b)
}

// node appends n rewritten: names renamed, a blocked op wrapped in casts,
// Casts to float32 and float constants turned float16.
func (g *fp16Graph) node(n *fp16Node, keep32 map[string]bool, idx int) error {
	if len(n.graphs) > 0 {
		return fmt.Errorf("node %q (%s) has a subgraph (attribute %s): control flow does not convert to float16", n.name, n.op, n.graphs[0])
	}
	ins := make([]string, len(n.in))
	outs := make([]string, len(n.out))
	var after [][2]string // casts back to float16 after a blocked node
	for i, v := range n.in {
		ins[i] = g.name(v)
		if v == "" {
			continue
		}
		if n.blocked() && g.types[v] == onnxFloat && !keep32[v] {
			c := fmt.Sprintf("%s/precog_fp32_%d_%d", v, idx, i)
			g.cast(ins[i], c, onnxFloat)
			ins[i] = c
		}
		if !n.blocked() && g.types[v] == onnxUnknown {
			return fmt.Errorf("node %q (%s) reads %q, whose element type the float16 conversion cannot follow", n.name, n.op, v)
		}
	}
	for i, v := range n.out {
		outs[i] = g.name(v)
		if v != "" && n.blocked() && g.types[v] == onnxFloat {
			after = append(after, [2]string{outs[i] + "/precog_fp32", outs[i]})
			outs[i] += "/precog_fp32"
		}
	}
	attrs := func(name string, raw []byte) ([]byte, error) {
		switch {
		case n.op == "Cast" && name == "to" && n.ints["to"] == onnxFloat && !n.blocked():
			return attrI("to", onnxFloat16), nil
		case (n.op == "Constant" || n.op == "ConstantOfShape") && name == "value":
			t, err := tensorToFP16(n.tensors["value"])
			if err != nil {
				return nil, err
			}
			return attrTensor("value", t), nil
		}
		return raw, nil
	}
	b, err := encodeNode(n.raw, ins, outs, attrs)
	if err != nil {
		return fmt.Errorf("node %q: %w", n.name, err)
	}
	if n.op == "ConstantOfShape" && n.tensors["value"] == nil {
		// Its default is a float32 zero: make it a float16 one.
		b = appendMsg(b, fNodeAttr, attrTensor("value", fp16Tensor("", []int64{1}, []float32{0})))
	}
	g.nodes = appendMsg(g.nodes, fGraphNode, b)
	for _, c := range after {
		g.cast(c[0], c[1], onnxFloat16)
	}
	return nil
}

// parseFP16Node decodes a node with its domain, name, tensor attributes
// and the names of its graph attributes.
func parseFP16Node(raw []byte) (fp16Node, error) {
	gn, err := parseNode(raw)
	if err != nil {
		return fp16Node{}, err
	}
	n := fp16Node{graphNode: gn, tensors: map[string][]byte{}, raw: raw}
	err = walk(raw, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fNodeName:
			n.name = string(f.data)
		case fNodeDomain:
			n.domain = string(f.data)
		case fNodeAttr:
			var name string
			var t []byte
			graph := false
			if err := walk(f.data, func(a field) error {
				switch {
				case a.num == fAttrName && a.typ == protowire.BytesType:
					name = string(a.data)
				case a.num == fAttrT && a.typ == protowire.BytesType:
					t = a.data
				case a.num == fAttrG || a.num == fAttrGraphs:
					graph = true
				}
				return nil
			}); err != nil {
				return err
			}
			if t != nil {
				n.tensors[name] = t
			}
			if graph {
				n.graphs = append(n.graphs, name)
			}
		}
		return nil
	})
	return n, err
}

// encodeNode re-encodes a NodeProto with new inputs and outputs, each
// attribute passed through edit.
func encodeNode(raw []byte, ins, outs []string, edit func(name string, attr []byte) ([]byte, error)) ([]byte, error) {
	var b []byte
	for _, s := range ins {
		b = appendStr(b, fNodeInput, s)
	}
	for _, s := range outs {
		b = appendStr(b, fNodeOutput, s)
	}
	err := walk(raw, func(f field) error {
		switch {
		case f.num == fNodeInput || f.num == fNodeOutput:
		case f.num == fNodeAttr && f.typ == protowire.BytesType:
			var name string
			if err := walk(f.data, func(a field) error {
				if a.num == fAttrName && a.typ == protowire.BytesType {
					name = string(a.data)
				}
				return nil
			}); err != nil {
				return err
			}
			a, err := edit(name, f.data)
			if err != nil {
				return err
			}
			b = appendMsg(b, fNodeAttr, a)
		default:
			b = appendField(b, f)
		}
		return nil
	})
	return b, err
}

// appendField appends f as it was read.
func appendField(b []byte, f field) []byte {
	b = protowire.AppendTag(b, f.num, f.typ)
	switch f.typ {
	case protowire.VarintType:
		return protowire.AppendVarint(b, f.v)
	case protowire.Fixed32Type:
		return protowire.AppendFixed32(b, uint32(f.v))
	case protowire.Fixed64Type:
		return protowire.AppendFixed64(b, f.v)
	default:
		return protowire.AppendBytes(b, f.data)
	}
}

func attrTensor(name string, t []byte) []byte {
	b := appendStr(nil, fAttrName, name)
	b = appendMsg(b, fAttrT, t)
	return appendVarint(b, fAttrType, attrTypeTensor)
}
