package model

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Deterministic top-k ties. A TopK node (sorted) returns its k largest
// scores and their indices, but which of several equal scores comes first
// is the runtime's choice: ONNX Runtime's CPU kernel puts the lower index
// first, its CUDA kernel does not (on an H200 the recs model's top-50 id
// lists differed from the CPU's on ties in 17% of rows, the scores
// identical). Where a model stores both lists of one TopK, precog orders
// each run of equal scores in a row by ascending stored id, so a list is
// the same on every device and runtime. Which of several items tied at the
// k-th score make the list stays the runtime's choice.
//
// The pair is found in the graph at load: the stored scores output is the
// TopK's values output through elementwise steps (Identity, Cast, a unary
// op, or arithmetic with a constant: equal values stay equal), and the
// stored ids output is its indices output through Identity, Cast or a
// Gather from a constant id table (index -> item id).

// tiePair is a stored scores list and the stored ids list of one TopK.
type tiePair struct{ scores, ids int } // indexes into Model.outputs

// graphNode is what the graph walks need of a NodeProto.
type graphNode struct {
	op      string
	in, out []string
	ints    map[string]int64 // int attributes
}

// graphNodes decodes a GraphProto's nodes and the names of its constant
// values (initializers and Constant nodes' outputs).
func graphNodes(graph []byte) (nodes []graphNode, consts map[string]bool, err error) {
	consts = map[string]bool{}
	err = walk(graph, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fGraphInitializer:
			return walk(f.data, func(t field) error {
				if t.num == fTensorName && t.typ == protowire.BytesType {
					consts[string(t.data)] = true
				}
				return nil
			})
		case fGraphNode:
			n, err := parseNode(f.data)
			if err != nil {
				return err
			}
			if n.op == "Constant" {
				for _, o := range n.out {
					consts[o] = true
				}
			}
			nodes = append(nodes, n)
		}
		return nil
	})
	return nodes, consts, err
}

func parseNode(b []byte) (graphNode, error) {
	n := graphNode{ints: map[string]int64{}}
	err := walk(b, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fNodeInput:
			n.in = append(n.in, string(f.data))
		case fNodeOutput:
			n.out = append(n.out, string(f.data))
		case fNodeOpType:
			n.op = string(f.data)
		case fNodeAttr:
			var name string
			var v int64
			isInt := false
			if err := walk(f.data, func(a field) error {
				switch {
				case a.num == fAttrName && a.typ == protowire.BytesType:
					name = string(a.data)
				case a.num == fAttrI && a.typ == protowire.VarintType:
					v, isInt = int64(a.v), true
				}
				return nil
			}); err != nil {
				return err
			}
			if isInt {
				n.ints[name] = v
			}
		}
		return nil
	})
	return n, err
}

// equalityKeeping are unary elementwise ops: equal inputs give equal
// outputs.
var equalityKeeping = map[string]bool{
	"Identity": true, "Cast": true, "Neg": true, "Abs": true, "Relu": true, "Sigmoid": true,
	"Tanh": true, "Exp": true, "Log": true, "Sqrt": true, "Softplus": true,
}

// constArith are binary elementwise ops that keep equality when one operand
// is a constant.
var constArith = map[string]bool{"Mul": true, "Div": true, "Add": true, "Sub": true}

// topKTiePairs finds, among m's stored list outputs, each scores/ids pair
// that comes from one sorted TopK node of the graph.
func (m *Model) topKTiePairs(data []byte) ([]tiePair, error) {
	_, graph, err := modelOpsetAndGraph(data)
	if err != nil {
		return nil, err
	}
	nodes, consts, err := graphNodes(graph)
	if err != nil {
		return nil, err
	}
	producer := map[string]int{} // value -> node index
	for i, n := range nodes {
		for _, o := range n.out {
			producer[o] = i
		}
	}
	// back follows v up through steps that keep equality (scores) or that
	// map an index to an id (ids) and returns the TopK output it reaches.
	back := func(v string, ids bool) (node int, slot int, ok bool) {
		for range 32 {
			i, found := producer[v]
			if !found {
				return 0, 0, false
			}
			n := nodes[i]
			switch {
			case n.op == "TopK":
				return i, slices.Index(n.out, v), true
			case n.op == "Identity" || n.op == "Cast":
				v = n.in[0]
			case ids && n.op == "Gather" && len(n.in) == 2 && consts[n.in[0]] && n.ints["axis"] == 0:
				v = n.in[1]
			case !ids && equalityKeeping[n.op] && len(n.in) == 1:
				v = n.in[0]
			case !ids && constArith[n.op] && len(n.in) == 2 && consts[n.in[0]] != consts[n.in[1]]:
				v = n.in[0]
				if consts[v] {
					v = n.in[1]
				}
			default:
				return 0, 0, false
			}
		}
		return 0, 0, false
	}
	var pairs []tiePair
	for si, so := range m.outputs {
		if !so.list || !so.kind.isFloat() || so.pool {
			continue
		}
		sn, slot, ok := back(so.name, false)
		if !ok || slot != 0 {
			continue
		}
		if sorted, set := nodes[sn].ints["sorted"]; set && sorted == 0 {
			continue // unsorted: equal scores need not be adjacent
		}
		for ii, io := range m.outputs {
			if !io.list || (io.kind != kindInt64 && io.kind != kindInt32) {
				continue
			}
			if in, slot, ok := back(io.name, true); ok && in == sn && slot == 1 {
				pairs = append(pairs, tiePair{scores: si, ids: ii})
				break
			}
		}
	}
	return pairs, nil
}

// orderTies puts each run of equal scores in a row in ascending id order.
func (m *Model) orderTies(cs []collector) {
	for _, p := range m.ties {
		switch s := cs[p.scores].(type) {
		case *typedCollector[float32]:
			orderTiesOf(s.data, cs[p.ids], s.width)
		case *typedCollector[float64]:
			orderTiesOf(s.data, cs[p.ids], s.width)
		}
	}
}

func orderTiesOf[S float32 | float64](scores []S, ids collector, w int) {
	switch c := ids.(type) {
	case *typedCollector[int64]:
		orderRuns(scores, c.data, w)
	case *typedCollector[int32]:
		orderRuns(scores, c.data, w)
	}
}

// orderRuns sorts ids within each run of equal scores of each w-wide row.
func orderRuns[S float32 | float64, I cmp.Ordered](scores []S, ids []I, w int) {
	if w <= 1 || len(scores) != len(ids) {
		return
	}
	for r := 0; r+w <= len(scores); r += w {
		s, id := scores[r:r+w], ids[r:r+w]
		for i := 0; i < w; {
			j := i + 1
			for j < w && s[j] == s[i] {
				j++
			}
			if j-i > 1 {
				slices.Sort(id[i:j])
			}
			i = j
		}
	}
}
