package model

import (
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// elemKind is a tensor element type precog can feed and store.
type elemKind int

const (
	kindFloat32 elemKind = iota
	kindFloat64
	kindInt32
	kindInt64
	// kindString is a tensor(string): fed from string columns (a
	// OneHotEncoder or LabelEncoder pipeline), stored as text.
	kindString
)

var kindNames = [...]string{"float32", "float64", "int32", "int64", "string"}

func (k elemKind) String() string { return kindNames[k] }

// size is the bytes of one element in a tensor (a string's header for
// kindString: its bytes vary).
func (k elemKind) size() int {
	switch k {
	case kindFloat32, kindInt32:
		return 4
	case kindFloat64, kindInt64:
		return 8
	}
	return 16
}

func (k elemKind) isFloat() bool { return k == kindFloat32 || k == kindFloat64 }

func (k elemKind) arrowType() arrow.DataType {
	switch k {
	case kindFloat32:
		return arrow.PrimitiveTypes.Float32
	case kindFloat64:
		return arrow.PrimitiveTypes.Float64
	case kindInt32:
		return arrow.PrimitiveTypes.Int32
	case kindString:
		return arrow.BinaryTypes.String
	default:
		return arrow.PrimitiveTypes.Int64
	}
}

func kindOf(typeName string) (elemKind, bool) {
	for i, n := range kindNames {
		if n == typeName {
			return elemKind(i), true
		}
	}
	return 0, false
}

const supportedTypes = "float32, float64, int32, int64, string"

// input is one model input bound to the spec's columns.
type input struct {
	name    string
	kind    elemKind
	rank    int      // 1: [N], 2: [N, width]
	width   int      // static trailing dimension; -1 when dynamic
	columns []string // numeric columns stacked into [N, len(columns)]
	list    string   // or one list / fixed-size-list column -> [N, len]
	shape   []int64  // as declared, for error text
	// text is set on a tokenized text input (text.go); derived is "mask"
	// or "zeros" on a mask_of / zeros_like input, which follows input
	// textOf.
	text    *textInput
	derived string
	textOf  int
}

// field is the spec path of this input's column mapping, for errors.
func (in *input) field() string {
	if in.list != "" {
		return "model.inputs." + in.name + ".column"
	}
	return "model.inputs." + in.name + ".columns"
}

// output is one model output the spec stores.
type output struct {
	name  string
	field string   // stored field name
	kind  elemKind // element type
	list  bool     // [N, k] with k != 1 -> list field; else scalar
	width int      // static k of a list output; -1 dynamic
	// zipKey is set for a sequence<map<K,V>> output (sklearn's ZipMap):
	// the key type, "int64" or "string"; kind is then V's type.
	zipKey string
	// pool is set for a [N,T,D] output (last_hidden_state) reduced to a
	// [N,D] list field by model.pooling.
	pool bool
	// inGraph: the pooling (and normalize: l2) run as nodes appended to
	// the graph (graphpool.go); the session returns [N,D].
	inGraph bool
}

func names(ts []TensorInfo) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Name
	}
	return strings.Join(s, ", ")
}

// checkNamed refuses the first (by name) of the spec's model.inputs or
// model.outputs entries (kind "input" or "output") that names no tensor
// of the model.
func (m *Model) checkNamed(kind string, specNames []string, ts []TensorInfo) error {
	slices.Sort(specNames)
	for _, n := range specNames {
		if _, ok := findTensor(ts, n); !ok {
			return m.errorf("model."+kind+"s."+n, "no %s %q in %s (%ss: %s)", kind, n, m.spec.Path, kind, names(ts))
		}
	}
	return nil
}

func findTensor(ts []TensorInfo, name string) (TensorInfo, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

func (m *Model) bindInputs() error {
	path := m.spec.Path
	if len(m.spec.Inputs) == 0 {
		return m.errorf("model.inputs", "required: map each model input to columns (inputs of %s: %s)", path, names(m.info.Inputs))
	}
	if err := m.checkNamed("input", slices.Collect(maps.Keys(m.spec.Inputs)), m.info.Inputs); err != nil {
		return err
	}
	for _, t := range m.info.Inputs {
		is, ok := m.spec.Inputs[t.Name]
		if !ok {
			return m.errorf("model.inputs", "input %q of %s is not mapped to columns (inputs: %s)", t.Name, path, names(m.info.Inputs))
		}
		f := "model.inputs." + t.Name
		if len(is.Text) > 0 || is.MaskOf != "" || is.ZerosLike != "" {
			if err := m.bindTextInput(t, is); err != nil {
				return err
			}
			continue
		}
		if (len(is.Columns) == 0) == (is.Column == "") {
			return m.errorf(f, "set exactly one of columns (numeric columns) or column (one list column)")
		}
		if !t.Tensor {
			return m.errorf(f, "input %q is %s, not a tensor; precog feeds tensors of %s", t.Name, t.Type, supportedTypes)
		}
		kind, ok := kindOf(t.Type)
		if !ok {
			return m.errorf(f, "input %q has element type %s; precog feeds %s", t.Name, t.Type, supportedTypes)
		}
		if kind == kindString && is.Column != "" {
			return m.errorf(f+".column", "input %q is a string tensor: feed it string columns with columns: [...]", t.Name)
		}
		in := &input{name: t.Name, kind: kind, columns: is.Columns, list: is.Column, shape: t.Shape, rank: 2, width: -1}
		switch {
		case t.Shape == nil:
			// Undeclared rank: feed [N, k].
		case len(t.Shape) == 1:
			in.rank, in.width = 1, 1
			if in.list != "" || len(in.columns) != 1 {
				return m.errorf(in.field(), "input %q has shape %s: it takes exactly one numeric column", t.Name, shapeString(t))
			}
		case len(t.Shape) == 2:
			in.width = int(t.Shape[1])
		default:
			return m.errorf(f, "input %q has shape %s; precog feeds inputs of shape [N] or [N,k]", t.Name, shapeString(t))
		}
		if len(t.Shape) > 0 && t.Shape[0] >= 0 {
			// A fixed batch dimension: batches are run in chunks of that
			// many rows, the last one zero-padded.
			b := int(t.Shape[0])
			if b == 0 || (m.fixedBatch > 0 && b != m.fixedBatch) {
				return m.errorf(f, "input %q has shape %s: its batch dimension differs from the other inputs' (%d)", t.Name, shapeString(t), m.fixedBatch)
			}
			m.fixedBatch = b
		}
		if len(in.columns) > 0 && in.width >= 0 && len(in.columns) != in.width {
			return m.errorf(in.field(), "%d columns but input %q has shape %s", len(in.columns), t.Name, shapeString(t))
		}
		m.inputs = append(m.inputs, in)
	}
	return m.linkTextInputs()
}

func (m *Model) bindOutputs() error {
	path := m.spec.Path
	if len(m.spec.Outputs) == 0 {
		return m.errorf("model.outputs", "required: map model outputs to field names (outputs of %s: %s)", path, names(m.info.Outputs))
	}
	if err := m.checkNamed("output", slices.Collect(maps.Keys(m.spec.Outputs)), m.info.Outputs); err != nil {
		return err
	}
	seen := map[string]string{}
	for _, t := range m.info.Outputs {
		fieldName, ok := m.spec.Outputs[t.Name]
		if !ok {
			continue // not stored, not run
		}
		f := "model.outputs." + t.Name
		if fieldName == "" {
			return m.errorf(f, "empty field name")
		}
		if prev, dup := seen[fieldName]; dup {
			return m.errorf(f, "field %q is already the field of output %q", fieldName, prev)
		}
		seen[fieldName] = t.Name
		if o, ok := zipMapOutput(t, fieldName); ok {
			m.outputs = append(m.outputs, o)
			m.outNames = append(m.outNames, t.Name)
			m.fields = append(m.fields, arrow.Field{Name: fieldName, Type: o.mapType()})
			continue
		}
		if !t.Tensor {
			return m.errorf(f, "output %q is %s, not a tensor; precog stores tensors of %s and sequence<map<int64|string,float32|float64|int64>> (leave it out of model.outputs to ignore it)", t.Name, t.Type, supportedTypes)
		}
		kind, ok := kindOf(t.Type)
		if !ok {
			return m.errorf(f, "output %q has element type %s; precog stores %s", t.Name, t.Type, supportedTypes)
		}
		o := &output{name: t.Name, field: fieldName, kind: kind, width: -1}
		if len(t.Shape) == 3 {
			if err := m.bindPooled(o, t); err != nil {
				return err
			}
			m.outputs = append(m.outputs, o)
			m.outNames = append(m.outNames, t.Name)
			m.fields = append(m.fields, arrow.Field{Name: fieldName, Type: arrow.ListOf(kind.arrowType())})
			continue
		}
		switch {
		case len(t.Shape) == 1:
		case len(t.Shape) == 2 && t.Shape[1] == 1:
		case len(t.Shape) == 2:
			o.list = true
			o.width = int(t.Shape[1])
		case t.Shape == nil:
			return m.errorf(f, "output %q declares no shape; precog stores outputs of shape [N], [N,1] (scalar) or [N,k] (list)", t.Name)
		default:
			return m.errorf(f, "output %q has shape %s; precog stores outputs of shape [N], [N,1] (scalar) or [N,k] (list)", t.Name, shapeString(t))
		}
		m.outputs = append(m.outputs, o)
		m.outNames = append(m.outNames, t.Name)
		typ := kind.arrowType()
		if o.list {
			typ = arrow.ListOf(typ)
		}
		m.fields = append(m.fields, arrow.Field{Name: fieldName, Type: typ})
	}
	m.schema = arrow.NewSchema(m.fields, nil)
	return nil
}
