package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/precog-ml/precog/jobs"
	"google.golang.org/protobuf/encoding/protowire"
)

// Pooling in the graph. A text model's [N,T,D] output (last_hidden_state)
// is reduced by model.pooling (masked mean, cls or masked max) and, with
// normalize: l2, scaled to unit length by nodes appended to the ONNX graph
// at load, so a run returns [N,D]: on a GPU only that leaves the device,
// and Go pools nothing. The ModelProto is edited with protowire: new
// NodeProto, TensorProto (initializer) and ValueInfoProto (graph output)
// fields are appended to the GraphProto's bytes, which protobuf merges as
// repeated fields; nothing else of the model is decoded or re-encoded.
//
// Go pools (poolCollector) only where the graph cannot take the nodes: a
// model without an attention-mask input (mask_of) for mean or max, or a
// default-domain opset below 11 (older Reduce*/Unsqueeze forms).

// minGraphPoolOpset is the oldest default-domain opset the appended nodes
// are written for.
const minGraphPoolOpset = 11

// graphPoolPrefix names every value the pooling nodes add.
const graphPoolPrefix = "precog_pool/"

// poolInGraph appends the pooling (and l2) nodes for every pooled output
// of m to the model data, points the session at the new [N,D] outputs and
// marks them pooled in the graph. It returns data unchanged, and Go pools,
// where the graph cannot be extended (see above); why names the reason.
func (m *Model) poolInGraph(data []byte) (out []byte, why string, err error) {
	var pooled []int
	for i, o := range m.outputs {
		if o.pool {
			pooled = append(pooled, i)
		}
	}
	if len(pooled) == 0 {
		return data, "", nil
	}
	if m.opts.goPooling {
		return data, "asked for by the caller", nil
	}
	mask := ""
	for _, in := range m.inputs {
		if in.derived == "mask" {
			mask = in.name
		}
	}
	if mask == "" && m.spec.Pooling != jobs.PoolingCLS {
		return data, "the model has no attention-mask input (mask_of) to pool over", nil
	}
	opset, graph, err := modelOpsetAndGraph(data)
	if err != nil {
		return nil, "", err
	}
	if opset < minGraphPoolOpset {
		return data, fmt.Sprintf("its opset %d is below %d", opset, minGraphPoolOpset), nil
	}
	g := &graphEdit{opset: opset}
	for _, i := range pooled {
		o := m.outputs[i]
		name := g.pool(o.name, mask, m.spec.Pooling, m.spec.Normalize == jobs.NormalizeL2)
		m.outNames[i] = name
		o.inGraph = true
	}
	return replaceGraph(data, slices.Concat(graph, g.b)), "", nil // graph aliases data
}

// GoPooling says why Go pools the model's [N,T,D] output instead of nodes
// appended to its graph; empty when the graph pools (or nothing is pooled).
func (m *Model) GoPooling() string { return m.goPooling }

// modelOpsetAndGraph finds the default domain's opset and the graph bytes.
func modelOpsetAndGraph(data []byte) (opset int64, graph []byte, err error) {
	err = walk(data, func(f field) error {
		switch {
		case f.num == fModelGraph && f.typ == protowire.BytesType:
			graph = f.data
		case f.num == fModelOpset && f.typ == protowire.BytesType:
			domain, version := "", int64(0)
			if err := walk(f.data, func(o field) error {
				switch {
				case o.num == fOpsetDomain && o.typ == protowire.BytesType:
					domain = string(o.data)
				case o.num == fOpsetVersion && o.typ == protowire.VarintType:
					version = int64(o.v)
				}
				return nil
			}); err != nil {
				return err
			}
			if domain == "" || domain == "ai.onnx" {
				opset = version
			}
		}
		return nil
	})
	if err == nil && graph == nil {
		err = fmt.Errorf("no graph")
	}
	return opset, graph, err
}

// replaceGraph re-encodes the model with graph in place of its graph field
// (every other field copied as it was).
func replaceGraph(data, graph []byte) []byte {
	out := make([]byte, 0, len(data)+len(graph)/4+64)
	done := false
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n < 0 || m < 0 {
			break // parseModel accepted data: not reached
		}
		if num == fModelGraph && typ == protowire.BytesType && !done {
			out = protowire.AppendTag(out, fModelGraph, protowire.BytesType)
			out = protowire.AppendBytes(out, graph)
			done = true
		} else if num != fModelGraph {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out
}

// graphEdit accumulates the GraphProto fields to append.
type graphEdit struct {
	opset int64
	b     []byte
	n     int // nodes added, for unique names
}

func (g *graphEdit) name(s string) string { return graphPoolPrefix + s }

// pool appends hidden's pooling (and l2) and returns the new output's name.
func (g *graphEdit) pool(hidden, mask string, mode jobs.Pooling, l2 bool) string {
	p := func(s string) string { return g.name(hidden + "/" + s) }
	var pooled string
	switch mode {
	case jobs.PoolingCLS:
		g.initInt64(p("zero"), nil, 0)
		pooled = p("cls")
		g.node("Gather", []string{hidden, p("zero")}, []string{pooled}, attrI("axis", 1))
	case jobs.PoolingMax:
		m3 := g.mask3(p, mask)
		g.node("Cast", []string{m3}, []string{p("mask_bool")}, attrI("to", onnxBool))
		g.initFloat(p("neg_inf"), float32(math.Inf(-1)))
		g.node("Where", []string{p("mask_bool"), hidden, p("neg_inf")}, []string{p("masked")})
		pooled = p("max")
		g.reduce("ReduceMax", 18, p("masked"), pooled, p("axis1"), 0)
	default: // mean
		m3 := g.mask3(p, mask)
		g.node("Mul", []string{hidden, m3}, []string{p("masked")})
		g.reduce("ReduceSum", 13, p("masked"), p("sum"), p("axis1"), 0)
		g.reduce("ReduceSum", 13, m3, p("count"), p("axis1"), 0)
		g.initFloat(p("one"), 1)
		g.node("Max", []string{p("count"), p("one")}, []string{p("count1")})
		pooled = p("mean")
		g.node("Div", []string{p("sum"), p("count1")}, []string{pooled})
	}
	if l2 {
		g.reduce("ReduceL2", 18, pooled, p("norm"), p("axis1"), 1)
		g.initFloat(p("eps"), 1e-12)
		g.node("Max", []string{p("norm"), p("eps")}, []string{p("norm1")})
		g.node("Div", []string{pooled, p("norm1")}, []string{p("l2")})
		pooled = p("l2")
	}
	g.output(pooled)
	return pooled
}

// mask3 is the attention mask as float [N,T,1].
func (g *graphEdit) mask3(p func(string) string, mask string) string {
	g.node("Cast", []string{mask}, []string{p("mask_f")}, attrI("to", onnxFloat))
	if g.opset >= 13 {
		g.initInt64(p("axis2"), []int64{1}, 2)
		g.node("Unsqueeze", []string{p("mask_f"), p("axis2")}, []string{p("mask3")})
	} else {
		g.node("Unsqueeze", []string{p("mask_f")}, []string{p("mask3")}, attrInts("axes", 2))
	}
	return p("mask3")
}

// reduce appends op over axis 1; from inputFrom on, the axes are an input.
func (g *graphEdit) reduce(op string, inputFrom int64, in, out, axesName string, keepdims int64) {
	if g.opset >= inputFrom {
		g.initInt64Once(axesName, []int64{1}, 1)
		g.node(op, []string{in, axesName}, []string{out}, attrI("keepdims", keepdims))
		return
	}
	g.node(op, []string{in}, []string{out}, attrInts("axes", 1), attrI("keepdims", keepdims))
}

func (g *graphEdit) node(op string, ins, outs []string, attrs ...[]byte) {
	var b []byte
	for _, s := range ins {
		b = appendStr(b, fNodeInput, s)
	}
	for _, s := range outs {
		b = appendStr(b, fNodeOutput, s)
	}
	g.n++
	b = appendStr(b, fNodeName, g.name(fmt.Sprintf("%s_%d", op, g.n)))
	b = appendStr(b, fNodeOpType, op)
	for _, a := range attrs {
		b = appendMsg(b, fNodeAttr, a)
	}
	g.b = appendMsg(g.b, fGraphNode, b)
}

func attrI(name string, v int64) []byte {
	b := appendStr(nil, fAttrName, name)
	b = appendVarint(b, fAttrI, uint64(v))
	return appendVarint(b, fAttrType, attrTypeInt)
}

func attrInts(name string, vs ...int64) []byte {
	b := appendStr(nil, fAttrName, name)
	for _, v := range vs {
		b = appendVarint(b, fAttrInts, uint64(v))
	}
	return appendVarint(b, fAttrType, attrTypeInts)
}

// initInt64Once adds an initializer shared by several nodes (the axes).
func (g *graphEdit) initInt64Once(name string, dims []int64, v int64) {
	if g.has(name) {
		return
	}
	g.initInt64(name, dims, v)
}

// has reports whether an initializer of that name was appended already.
func (g *graphEdit) has(name string) bool {
	found := false
	_ = walk(g.b, func(f field) error {
		if f.num == fGraphInitializer && !found {
			_ = walk(f.data, func(t field) error {
				if t.num == fTensorName && string(t.data) == name {
					found = true
				}
				return nil
			})
		}
		return nil
	})
	return found
}

func (g *graphEdit) initInt64(name string, dims []int64, v int64) {
	g.initializer(name, onnxInt64, dims, binary.LittleEndian.AppendUint64(nil, uint64(v)))
}

func (g *graphEdit) initFloat(name string, v float32) {
	g.initializer(name, onnxFloat, nil, binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
}

func (g *graphEdit) initializer(name string, elem uint64, dims []int64, raw []byte) {
	var b []byte
	for _, d := range dims {
		b = appendVarint(b, fTensorDims, uint64(d))
	}
	b = appendVarint(b, fTensorDataType, elem)
	b = appendStr(b, fTensorName, name)
	b = protowire.AppendTag(b, fTensorRaw, protowire.BytesType)
	b = protowire.AppendBytes(b, raw)
	g.b = appendMsg(g.b, fGraphInitializer, b)
}

// output declares a float graph output of unspecified shape.
func (g *graphEdit) output(name string) {
	tt := appendVarint(nil, fTensorTypeElem, onnxFloat)
	typ := appendMsg(nil, fTypeTensor, tt)
	b := appendStr(nil, fValueName, name)
	b = appendMsg(b, fValueType, typ)
	g.b = appendMsg(g.b, fGraphOutput, b)
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMsg(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
