package model

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	ort "github.com/yalue/onnxruntime_go"
)

// String tensors: a scikit-learn pipeline with a OneHotEncoder or a
// LabelEncoder takes its categorical features as a tensor(string) input,
// `cat: { columns: [country, device] }` → [N, 2]; a string output (a
// predicted class name) is stored as a text field. onnxruntime_go copies
// strings into the runtime (StringTensor.SetContents), so unlike numeric
// inputs they are not fed without a copy.

// stringArray is the part of the Arrow string arrays (string, large
// string, string view) the encoder reads.
type stringArray interface {
	arrow.Array
	Value(int) string
}

// checkStringType checks that a column can feed a string input.
func (m *Model) checkStringType(in *input, path string, f arrow.Field) error {
	switch f.Type.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return nil
	}
	return m.errorf(path, "column %q is %s, want strings for input %q (string)", f.Name, f.Type, in.name)
}

// scanStrings rejects the rows whose value is null.
func scanStrings(arr arrow.Array, col string, reject func(row int, col, reason string)) {
	if arr.NullN() == 0 {
		return
	}
	for r := range arr.Len() {
		if arr.IsNull(r) {
			reject(r, col, "column "+col+": null")
		}
	}
}

// fillStrings writes a string input's [rows, w] values for the kept rows,
// padding rows empty.
func fillStrings(bufs *batchBufs, i int, cols []colRef, rows []int, padded, w int) []string {
	dst, _ := bufs.data[i].([]string)
	dst = grow(dst, padded*w)
	for j, c := range cols {
		a := c.arr.(stringArray)
		for k, r := range rows {
			dst[k*w+j] = a.Value(r)
		}
	}
	clear(dst[len(rows)*w:])
	return dst
}

// newStringTensor copies d into a runtime string tensor of shape.
func newStringTensor(shape ort.Shape, d []string) (*ort.StringTensor, error) {
	t, err := ort.NewStringTensor(shape)
	if err != nil {
		return nil, err
	}
	if len(d) > 0 {
		if err := t.SetContents(d); err != nil {
			t.Destroy()
			return nil, err
		}
	}
	return t, nil
}

// stringCollector gathers a tensor(string) output as a string field ([N]
// or [N,1]) or a list of strings ([N,k]).
type stringCollector struct {
	o     *output
	width int
	data  []string
}

func (c *stringCollector) take(v ort.Value, runRows, keep int, _ bool) error {
	t, ok := v.(*ort.StringTensor)
	if !ok {
		return fmt.Errorf("got %T, want a string tensor", v)
	}
	shape := t.GetShape()
	w, ok := c.o.rowWidth(shape)
	if !ok {
		return fmt.Errorf("shape %v, want [N], [N,1] or [N,k]", shape)
	}
	if shape[0] != int64(runRows) || (c.width >= 0 && w != c.width) {
		return fmt.Errorf("shape %v for %d input rows", shape, runRows)
	}
	c.width = w
	d, err := t.GetContents()
	if err != nil {
		return err
	}
	c.data = append(c.data, d[:keep*w]...)
	return nil
}

func (c *stringCollector) array(n int) arrow.Array {
	if !c.o.list {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		defer b.Release()
		b.AppendValues(c.data, nil)
		return b.NewArray()
	}
	b := array.NewListBuilder(memory.DefaultAllocator, arrow.BinaryTypes.String)
	defer b.Release()
	vb := b.ValueBuilder().(*array.StringBuilder)
	w := max(c.width, 0)
	for r := range n {
		b.Append(true)
		vb.AppendValues(c.data[r*w:(r+1)*w], nil)
	}
	return b.NewArray()
}
