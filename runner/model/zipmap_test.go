package model

import (
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// TestZipMapOutput stores sklearn's sequence<map<K,float>> output as an
// Arrow map field whose entries are the class labels and the reference
// probabilities, in class order, for int64 and string labels, with
// rejected rows left out and a fixed-size chunking of several runs.
func TestZipMapOutput(t *testing.T) {
	for _, tc := range []struct {
		model string
		key   arrow.DataType
	}{
		{"classifier_zipmap", arrow.PrimitiveTypes.Int64},
		{"classifier_zipmap_str", arrow.BinaryTypes.String},
	} {
		t.Run(tc.model, func(t *testing.T) {
			tm := testModel(t, tc.model)
			spec := specFor(t, tc.model)
			spec.Outputs["output_probability"] = "proba"
			m := loadModel(t, spec)
			wantType := arrow.MapOf(tc.key, arrow.PrimitiveTypes.Float32)
			fields := m.OutputFields()
			if got := fields[len(fields)-1]; got.Name != "proba" || !arrow.TypeEqual(got.Type, wantType) {
				t.Fatalf("field %v, want proba %s", got, wantType)
			}
			const n = 57
			k := tm.InputWidth()
			x := features(n, k, false, 7)
			b, out := infer(t, m, columnsRecord(x, n, k, arrow.PrimitiveTypes.Float32, map[[2]int]bool{{3, 1}: true, {40, 0}: true}))
			if len(b.Rejects) != 2 || len(b.Rows) != n-2 {
				t.Fatalf("rejects %v, %d rows", b.Rejects, len(b.Rows))
			}
			var classes []string
			for _, o := range tm.Outputs {
				if o.Seq {
					classes = o.Classes
				}
			}
			kept := make([]float32, 0, len(b.Rows)*k)
			for _, r := range b.Rows {
				kept = append(kept, x[r*k:(r+1)*k]...)
			}
			ref, err := tm.Reference(kept, len(b.Rows))
			if err != nil {
				t.Fatal(err)
			}
			probs := ref["probabilities"].Float32
			col := out.Column(out.Schema().FieldIndices("proba")[0]).(*array.Map)
			keys, items := col.Keys(), col.Items().(*array.Float32)
			for r := range b.Rows {
				lo, hi := col.ValueOffsets(r)
				if int(hi-lo) != len(classes) {
					t.Fatalf("row %d: %d entries, want %d", r, hi-lo, len(classes))
				}
				for j := range classes {
					i := int(lo) + j
					if got := keys.ValueStr(i); got != classes[j] {
						t.Fatalf("row %d entry %d: key %s, want %s", r, j, got, classes[j])
					}
					want := probs[r*len(classes)+j]
					if d := math.Abs(float64(items.Value(i) - want)); d > 1e-6 {
						t.Fatalf("row %d class %s: %v, want %v", r, classes[j], items.Value(i), want)
					}
				}
			}
		})
	}
}

// TestZipMapOutputTypes: only sequences of maps with int64 or string keys
// and numeric values are stored; other non-tensors stay refused.
func TestZipMapOutputTypes(t *testing.T) {
	for typ, ok := range map[string]bool{
		"sequence<map<int64,float32>>":   true,
		"sequence<map<string,float64>>":  true,
		"sequence<map<int64,int64>>":     true,
		"sequence<map<float32,float32>>": false,
		"sequence<float32>":              false,
		"map<int64,float32>":             false,
		"sequence<map<string,string>>":   false,
	} {
		if _, got := zipMapOutput(TensorInfo{Name: "o", Type: typ}, "f"); got != ok {
			t.Errorf("%s: stored %v, want %v", typ, got, ok)
		}
	}
}
