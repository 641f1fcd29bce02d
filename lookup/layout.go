package lookup

import (
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
)

// layout is how one namespace turns a request's inputs into the Arrow record
// the job's source would have produced for that row: the key column plus the
// source columns the model spec reads, typed as the model input they feed.
// Building the same record as the batch path is what makes live results
// equal to precomputed ones.
type layout struct {
	key    string
	inputs []layoutInput // sorted by model input name
	cols   []layoutCol   // distinct source columns, in schema order
	byCol  map[string]int
	schema *arrow.Schema
}

// layoutInput is one model input: several scalar columns, or one list column.
type layoutInput struct {
	name    string
	columns []string // scalar columns, stacked
	list    string   // or one list column
	width   int      // values per row; -1 when the model leaves it dynamic
	// text: string columns (a text input's, or a tensor(string) input's),
	// given in a request's "text" object; mask_of / zeros_like inputs
	// are derived by the model and are not in the layout.
	text bool
}

// layoutCol is one source column of the record.
type layoutCol struct {
	name  string
	elem  arrow.DataType // float32 | float64 | int32 | int64 | string
	list  bool
	width int // list length; -1 dynamic
	text  bool
}

func elemArrowType(t string) (arrow.DataType, error) {
	switch t {
	case "float32":
		return arrow.PrimitiveTypes.Float32, nil
	case "float64":
		return arrow.PrimitiveTypes.Float64, nil
	case "int32":
		return arrow.PrimitiveTypes.Int32, nil
	case "int64":
		return arrow.PrimitiveTypes.Int64, nil
	}
	return nil, fmt.Errorf("element type %s is not supported for live inference", t)
}

// newLayout derives the layout from the job's model spec and the model's
// declared inputs.
func newLayout(spec *jobs.Spec, info model.Info) (*layout, error) {
	l := &layout{key: spec.Source.Key, byCol: map[string]int{}}
	names := make([]string, 0, len(spec.Model.Inputs))
	for n := range spec.Model.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		in := spec.Model.Inputs[name]
		var ti *model.TensorInfo
		for i := range info.Inputs {
			if info.Inputs[i].Name == name {
				ti = &info.Inputs[i]
			}
		}
		if ti == nil {
			return nil, fmt.Errorf("model.inputs.%s: the model has no such input", name)
		}
		if in.MaskOf != "" || in.ZerosLike != "" {
			continue // derived from the text input by the model
		}
		if len(in.Text) > 0 || ti.Type == "string" {
			cols := []string(in.Text)
			if len(cols) == 0 {
				cols = in.Columns
			}
			for i, c := range cols {
				if err := l.addCol(layoutCol{name: c, elem: arrow.BinaryTypes.String, width: 1, text: true}); err != nil {
					return nil, fmt.Errorf("model.inputs.%s[%d]: %w", name, i, err)
				}
			}
			l.inputs = append(l.inputs, layoutInput{name: name, columns: cols, width: len(cols), text: true})
			continue
		}
		elem, err := elemArrowType(ti.Type)
		if err != nil {
			return nil, fmt.Errorf("model.inputs.%s: %w", name, err)
		}
		width := -1
		if len(ti.Shape) >= 2 && ti.Shape[len(ti.Shape)-1] > 0 {
			width = int(ti.Shape[len(ti.Shape)-1])
		}
		li := layoutInput{name: name, columns: in.Columns, list: in.Column}
		if in.Column != "" {
			li.width = width
			if err := l.addCol(layoutCol{name: in.Column, elem: elem, list: true, width: width}); err != nil {
				return nil, fmt.Errorf("model.inputs.%s.column: %w", name, err)
			}
		} else {
			li.width = len(in.Columns)
			for i, c := range in.Columns {
				if err := l.addCol(layoutCol{name: c, elem: elem, width: 1}); err != nil {
					return nil, fmt.Errorf("model.inputs.%s.columns[%d]: %w", name, i, err)
				}
			}
		}
		l.inputs = append(l.inputs, li)
	}
	fields := []arrow.Field{{Name: l.key, Type: arrow.BinaryTypes.String}}
	for _, c := range l.cols {
		fields = append(fields, arrow.Field{Name: c.name, Type: c.arrowType()})
	}
	l.schema = arrow.NewSchema(fields, nil)
	return l, nil
}

func (l *layout) addCol(c layoutCol) error {
	if c.name == l.key {
		return fmt.Errorf("column %q is the key column", c.name)
	}
	if i, ok := l.byCol[c.name]; ok {
		if l.cols[i] != c {
			return fmt.Errorf("column %q feeds two inputs of different types", c.name)
		}
		return nil
	}
	l.byCol[c.name] = len(l.cols)
	l.cols = append(l.cols, c)
	return nil
}

func (c layoutCol) arrowType() arrow.DataType {
	if !c.list {
		return c.elem
	}
	if c.width > 0 {
		return arrow.FixedSizeListOf(int32(c.width), c.elem)
	}
	return arrow.ListOf(c.elem)
}

// row is one entity's source column values, ordered as layout.cols.
type row struct {
	key  string
	vals [][]float64
	strs []string // text columns' values, by column; nil without any
}

// rowFromPredict checks a predict request against the layout and returns
// its row, or a 400 naming the input and the expected length.
func (l *layout) rowFromPredict(req predictRequest) (row, error) {
	r := row{key: req.Key, vals: make([][]float64, len(l.cols))}
	if err := l.textFromPredict(req, &r); err != nil {
		return row{}, err
	}
	if !l.hasNumeric() {
		if req.Inputs != nil || req.Columns != nil {
			return row{}, badf(`the model reads only text: give "text" (by source column name: %s)`, l.colNames())
		}
		return r, nil
	}
	switch {
	case req.Inputs != nil:
		for name := range req.Inputs {
			if in := l.input(name); in == nil || in.text {
				return row{}, badf("inputs.%s: the model has no such input (have: %s)", name, l.inputNames())
			}
		}
		for _, in := range l.inputs {
			if in.text {
				continue
			}
			v, ok := req.Inputs[in.name]
			if !ok {
				return row{}, badf("inputs.%s: missing (want %s)", in.name, in.want())
			}
			if in.width >= 0 && len(v) != in.width {
				return row{}, badf("inputs.%s: want %s, got %d", in.name, in.want(), len(v))
			}
			if len(v) == 0 {
				return row{}, badf("inputs.%s: empty", in.name)
			}
			if in.list != "" {
				r.vals[l.byCol[in.list]] = v
			} else {
				for i, c := range in.columns {
					r.vals[l.byCol[c]] = v[i : i+1]
				}
			}
		}
	case req.Columns != nil:
		for name := range req.Columns {
			if i, ok := l.byCol[name]; !ok || l.cols[i].text {
				return row{}, badf("columns.%s: not an input column of the model spec (have: %s)", name, l.colNames())
			}
		}
		for i, c := range l.cols {
			if c.text {
				continue
			}
			v, ok := req.Columns[c.name]
			if !ok {
				return row{}, badf("columns.%s: missing", c.name)
			}
			if !c.list {
				if !req.ColumnScalar[c.name] && len(v) != 1 {
					return row{}, badf("columns.%s: want a number, got an array of %d", c.name, len(v))
				}
			} else {
				if req.ColumnScalar[c.name] {
					return row{}, badf("columns.%s: want an array of %s, got a number", c.name, widthText(c.width))
				}
				if (c.width >= 0 && len(v) != c.width) || len(v) == 0 {
					return row{}, badf("columns.%s: want %s, got %d", c.name, widthText(c.width), len(v))
				}
			}
			r.vals[i] = v
		}
	default:
		return row{}, badf(`give "inputs" (by model input name: %s) or "columns" (by source column name: %s)`, l.inputNames(), l.colNames())
	}
	for i, c := range l.cols {
		if c.elem.ID() == arrow.INT32 || c.elem.ID() == arrow.INT64 {
			for j, f := range r.vals[i] {
				if f != float64(int64(f)) {
					return row{}, badf("%s[%d]: want an integer, got %v", c.name, j, f)
				}
			}
		}
	}
	return r, nil
}

func (in layoutInput) want() string {
	if in.width < 0 {
		return "an array of numbers"
	}
	return widthText(in.width)
}

func widthText(w int) string {
	if w < 0 {
		return "numbers"
	}
	if w == 1 {
		return "1 number"
	}
	return fmt.Sprintf("%d numbers", w)
}

func (l *layout) input(name string) *layoutInput {
	for i := range l.inputs {
		if l.inputs[i].name == name {
			return &l.inputs[i]
		}
	}
	return nil
}

func (l *layout) inputNames() string {
	s := make([]string, len(l.inputs))
	for i, in := range l.inputs {
		s[i] = in.name
	}
	return strings.Join(s, ", ")
}

func (l *layout) colNames() string {
	s := make([]string, len(l.cols))
	for i, c := range l.cols {
		s[i] = c.name
	}
	return strings.Join(s, ", ")
}

// record builds the Arrow record of rows. The caller releases it.
func (l *layout) record(mem memory.Allocator, rows []row) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, l.schema)
	defer b.Release()
	kb := b.Field(0).(*array.StringBuilder)
	for _, r := range rows {
		kb.Append(r.key)
	}
	for i, c := range l.cols {
		fb := b.Field(i + 1)
		if c.text {
			sb := fb.(*array.StringBuilder)
			for _, r := range rows {
				sb.Append(r.strs[i])
			}
			continue
		}
		for _, r := range rows {
			v := r.vals[i]
			if !c.list {
				appendNum(fb, v[0])
				continue
			}
			switch lb := fb.(type) {
			case *array.FixedSizeListBuilder:
				lb.Append(true)
				for _, f := range v {
					appendNum(lb.ValueBuilder(), f)
				}
			case *array.ListBuilder:
				lb.Append(true)
				for _, f := range v {
					appendNum(lb.ValueBuilder(), f)
				}
			}
		}
	}
	return b.NewRecordBatch()
}

func appendNum(b array.Builder, f float64) {
	switch vb := b.(type) {
	case *array.Float32Builder:
		vb.Append(float32(f))
	case *array.Float64Builder:
		vb.Append(f)
	case *array.Int32Builder:
		vb.Append(int32(f))
	case *array.Int64Builder:
		vb.Append(int64(f))
	}
}

func (l *layout) colNamesList() []string {
	s := make([]string, len(l.cols))
	for i, c := range l.cols {
		s[i] = c.name
	}
	return s
}
