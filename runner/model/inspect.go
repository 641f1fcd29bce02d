package model

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protowire"
)

// Info describes a model's graph inputs and outputs in graph order.
type Info struct {
	Inputs  []TensorInfo
	Outputs []TensorInfo
}

// TensorInfo describes one graph input or output.
type TensorInfo struct {
	Name string
	// Type is "float32", "int64", … for tensors, and spelled out for other
	// values, e.g. "sequence<map<int64,float32>>" for an sklearn ZipMap.
	Type string
	// Shape of a tensor; -1 marks a dynamic dimension. Nil for non-tensors
	// and for tensors whose rank the model does not declare.
	Shape []int64
	// Tensor is false for sequences, maps, optionals and sparse tensors,
	// which precog cannot feed or store.
	Tensor bool
}

// String renders the info as the table `precog inspect` prints.
func (in Info) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, sec := range []struct {
		title string
		ts    []TensorInfo
	}{{"inputs", in.Inputs}, {"outputs", in.Outputs}} {
		fmt.Fprintf(tw, "%s:\n", sec.title)
		for _, t := range sec.ts {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Name, t.Type, shapeString(t))
		}
	}
	tw.Flush()
	return b.String()
}

// shapeString renders a shape as [N,16]: a dynamic first dimension is the
// batch (N), other dynamic dimensions are "?".
func shapeString(t TensorInfo) string {
	if !t.Tensor {
		return ""
	}
	if t.Shape == nil {
		return "[?]"
	}
	parts := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		switch {
		case d >= 0:
			parts[i] = strconv.FormatInt(d, 10)
		case i == 0:
			parts[i] = "N"
		default:
			parts[i] = "?"
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Inspect reads the inputs and outputs of the ONNX model at path. It parses
// the protobuf itself, so it needs no ONNX Runtime and reports value types
// (sequences, maps) that the runtime's API does not describe.
func Inspect(path string) (Info, error) {
	data, err := readModelFile(path)
	if err != nil {
		return Info{}, err
	}
	info, err := parseModel(data)
	if err != nil {
		return Info{}, fmt.Errorf("%s: not an ONNX model: %w", path, err)
	}
	return info, nil
}

// elemTypeNames maps TensorProto.DataType to precog's type names.
var elemTypeNames = map[uint64]string{
	1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
	7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64",
	12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16",
	17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
	21: "uint4", 22: "int4", 23: "float4e2m1",
}

func elemTypeName(t uint64) string {
	if n, ok := elemTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("elem_type(%d)", t)
}

// field is one protobuf field: its number, wire type and raw value.
type field struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64 // varint and fixed values
	data []byte // bytes values (sub-messages, strings)
}

// walk calls fn for every top-level field of a protobuf message.
func walk(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.data, n = protowire.ConsumeBytes(b)
		case protowire.StartGroupType:
			_, n = protowire.ConsumeGroup(num, b)
		default:
			return fmt.Errorf("bad protobuf wire type %d", typ)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func parseModel(data []byte) (Info, error) {
	var graph []byte
	var ir uint64
	err := walk(data, func(f field) error {
		switch {
		case f.num == fModelIRVersion && f.typ == protowire.VarintType:
			ir = f.v
		case f.num == fModelGraph && f.typ == protowire.BytesType:
			graph = f.data
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	if ir == 0 || graph == nil {
		return Info{}, errors.New("no ir_version or graph")
	}
	var inputs, outputs [][]byte
	inits := map[string]bool{}
	err = walk(graph, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fGraphInput:
			inputs = append(inputs, f.data)
		case fGraphOutput:
			outputs = append(outputs, f.data)
		case fGraphInitializer:
			return walk(f.data, func(t field) error {
				if t.num == fTensorName && t.typ == protowire.BytesType {
					inits[string(t.data)] = true
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("graph: %w", err)
	}
	var info Info
	for _, raw := range inputs {
		t, err := parseValueInfo(raw)
		if err != nil {
			return Info{}, fmt.Errorf("graph input: %w", err)
		}
		// Models of IR version < 4 list initializers as inputs too; they
		// are weights, not inputs to feed.
		if !inits[t.Name] {
			info.Inputs = append(info.Inputs, t)
		}
	}
	for _, raw := range outputs {
		t, err := parseValueInfo(raw)
		if err != nil {
			return Info{}, fmt.Errorf("graph output: %w", err)
		}
		info.Outputs = append(info.Outputs, t)
	}
	if len(info.Outputs) == 0 {
		return Info{}, errors.New("graph has no outputs")
	}
	return info, nil
}

func parseValueInfo(b []byte) (TensorInfo, error) {
	var t TensorInfo
	var typ []byte
	err := walk(b, func(f field) error {
		switch {
		case f.num == fValueName && f.typ == protowire.BytesType:
			t.Name = string(f.data)
		case f.num == fValueType && f.typ == protowire.BytesType:
			typ = f.data
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	if t.Name == "" {
		return t, errors.New("value without a name")
	}
	if typ == nil {
		return t, fmt.Errorf("%q has no type", t.Name)
	}
	name, shape, tensor, err := parseType(typ, true)
	if err != nil {
		return t, fmt.Errorf("%q: %w", t.Name, err)
	}
	t.Type, t.Shape, t.Tensor = name, shape, tensor
	return t, nil
}

// parseType renders a TypeProto. Nested tensors (inside a sequence or a map)
// are written as their element type alone.
func parseType(b []byte, top bool) (name string, shape []int64, tensor bool, err error) {
	err = walk(b, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fTypeTensor:
			name, shape, err = parseTensorType(f.data, fTensorTypeElem, fTensorTypeShape)
			tensor = true
		case fTypeSparseTensor:
			var elem string
			elem, shape, err = parseTensorType(f.data, fSparseElem, fSparseShape)
			name = "sparse<" + elem + ">"
		case fTypeSequence:
			var elem []byte
			err = walk(f.data, func(s field) error {
				if s.num == fSeqElem && s.typ == protowire.BytesType {
					elem = s.data
				}
				return nil
			})
			inner := "?"
			if err == nil && elem != nil {
				inner, _, _, err = parseType(elem, false)
			}
			name = "sequence<" + inner + ">"
		case fTypeMap:
			key, val := "?", "?"
			err = walk(f.data, func(m field) error {
				switch {
				case m.num == fMapKey && m.typ == protowire.VarintType:
					key = elemTypeName(m.v)
				case m.num == fMapValue && m.typ == protowire.BytesType:
					var e error
					val, _, _, e = parseType(m.data, false)
					return e
				}
				return nil
			})
			name = "map<" + key + "," + val + ">"
		case fTypeOptional:
			inner := "?"
			err = walk(f.data, func(o field) error {
				if o.num == fOptElem && o.typ == protowire.BytesType {
					var e error
					inner, _, _, e = parseType(o.data, false)
					return e
				}
				return nil
			})
			name = "optional<" + inner + ">"
		}
		return err
	})
	if err == nil && name == "" {
		err = errors.New("unsupported value type")
	}
	if !top {
		shape, tensor = nil, false
	}
	return name, shape, tensor, err
}

func parseTensorType(b []byte, elemField, shapeField protowire.Number) (string, []int64, error) {
	var elem uint64
	var shape []int64
	err := walk(b, func(f field) error {
		switch {
		case f.num == elemField && f.typ == protowire.VarintType:
			elem = f.v
		case f.num == shapeField && f.typ == protowire.BytesType:
			shape = []int64{}
			return walk(f.data, func(d field) error {
				if d.num != fShapeDim || d.typ != protowire.BytesType {
					return nil
				}
				dim := int64(-1)
				err := walk(d.data, func(v field) error {
					if v.num == fDimValue && v.typ == protowire.VarintType {
						dim = int64(v.v)
					}
					return nil
				})
				if dim < 0 {
					// dim_param ("N", "batch") or unknown: dynamic.
					dim = -1
				}
				shape = append(shape, dim)
				return err
			})
		}
		return nil
	})
	return elemTypeName(elem), shape, err
}
