package model

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// CheckSchema checks the spec's input columns against the source schema
// before any data is read: every column exists and holds numbers (integers,
// floating point, booleans as 0/1, decimals; integer inputs take neither
// floating point nor decimal columns), and a `column:` input is a list or
// fixed-size list of numbers whose fixed size matches the model's static
// dimension. Plain list lengths are checked per row by Encode. Every bad
// column is reported, each with its field path, in one joined error.
func (m *Model) CheckSchema(schema *arrow.Schema) error {
	have := func() string { return compressNames(fieldNames(schema)) }
	var errs []error
	for _, in := range m.inputs {
		if in.text != nil {
			for j, c := range in.text.columns {
				path := fmt.Sprintf("model.inputs.%s.text[%d]", in.name, j)
				idx := schema.FieldIndices(c)
				if len(idx) == 0 {
					errs = append(errs, m.errorf(path, "column %q not in source schema (have: %s)", c, have()))
				} else if err := m.checkStringType(in, path, schema.Field(idx[0])); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if in.list != "" {
			idx := schema.FieldIndices(in.list)
			if len(idx) == 0 {
				errs = append(errs, m.errorf(in.field(), "column %q not in source schema (have: %s)", in.list, have()))
				continue
			}
			if _, err := m.listWidth(in, schema.Field(idx[0])); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		for j, c := range in.columns {
			path := fmt.Sprintf("%s[%d]", in.field(), j)
			idx := schema.FieldIndices(c)
			if len(idx) == 0 {
				errs = append(errs, m.errorf(path, "column %q not in source schema (have: %s)", c, have()))
				continue
			}
			if err := m.checkScalarType(in, path, schema.Field(idx[0])); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// isNumeric reports the Arrow types a feature may have: numbers, booleans
// (fed as 0/1) and decimals (fed as floating point).
func isNumeric(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64, arrow.BOOL, arrow.DECIMAL128, arrow.DECIMAL256:
		return true
	}
	return false
}

// isFractional reports the types that only floating point inputs take.
func isFractional(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.FLOAT32, arrow.FLOAT64, arrow.DECIMAL128, arrow.DECIMAL256:
		return true
	}
	return false
}

// checkElemType checks that values of type t can feed input in.
func (m *Model) checkElemType(in *input, path, col string, t, whole arrow.DataType) error {
	if !isNumeric(t) {
		return m.errorf(path, "column %q is %s, want numbers (integer, floating point, boolean or decimal) for input %q (%s)", col, whole, in.name, in.kind)
	}
	if isFractional(t) && !in.kind.isFloat() {
		return m.errorf(path, "column %q is %s but input %q is %s: floating point and decimal columns cannot feed integer inputs", col, whole, in.name, in.kind)
	}
	return nil
}

func (m *Model) checkScalarType(in *input, path string, f arrow.Field) error {
	if in.kind == kindString {
		return m.checkStringType(in, path, f)
	}
	return m.checkElemType(in, path, f.Name, f.Type, f.Type)
}

// listWidth checks a `column:` input's source field and returns the tensor
// width it implies: the model's static dimension, else the fixed size of a
// fixed-size list, else -1 (taken from the data, batch by batch).
func (m *Model) listWidth(in *input, f arrow.Field) (int, error) {
	var elemType arrow.DataType
	size := -1
	switch t := f.Type.(type) {
	case *arrow.ListType:
		elemType = t.Elem()
	case *arrow.LargeListType:
		elemType = t.Elem()
	case *arrow.FixedSizeListType:
		elemType = t.Elem()
		size = int(t.Len())
	default:
		return 0, m.errorf(in.field(), "column %q is %s, want a list or fixed-size list of numbers for input %q", f.Name, f.Type, in.name)
	}
	if err := m.checkElemType(in, in.field(), f.Name, elemType, f.Type); err != nil {
		return 0, err
	}
	if size >= 0 && in.width >= 0 && size != in.width {
		return 0, m.errorf(in.field(), "column %q is %s but input %q has shape %s", f.Name, f.Type, in.name, shapeString(TensorInfo{Shape: in.shape, Tensor: true}))
	}
	if in.width >= 0 {
		return in.width, nil
	}
	return size, nil
}

func fieldNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// splitNum splits "f12" into ("f", 12, true).
func splitNum(s string) (string, int, bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) || i == 0 || (s[i] == '0' && i < len(s)-1) {
		return s, 0, false
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, 0, false
	}
	return s[:i], n, true
}

// compressNames lists names sorted, with runs of three or more numbered
// names written as a range: "f0..f15, user_id".
func compressNames(names []string) string {
	type nm struct {
		s      string
		prefix string
		n      int
		num    bool
	}
	list := make([]nm, len(names))
	for i, s := range names {
		p, n, ok := splitNum(s)
		list[i] = nm{s, p, n, ok}
	}
	slices.SortFunc(list, func(a, b nm) int {
		if c := strings.Compare(a.prefix, b.prefix); c != 0 || !a.num || !b.num {
			if c == 0 {
				return strings.Compare(a.s, b.s)
			}
			return c
		}
		return a.n - b.n
	})
	var parts []string
	for i := 0; i < len(list); {
		j := i + 1
		if list[i].num {
			for j < len(list) && list[j].num && list[j].prefix == list[i].prefix && list[j].n == list[j-1].n+1 {
				j++
			}
		}
		if j-i >= 3 {
			parts = append(parts, list[i].s+".."+list[j-1].s)
			i = j
			continue
		}
		parts = append(parts, list[i].s)
		i++
	}
	const maxParts = 40
	if len(parts) > maxParts {
		more := len(parts) - maxParts
		parts = append(parts[:maxParts], fmt.Sprintf("… %d more", more))
	}
	return strings.Join(parts, ", ")
}
