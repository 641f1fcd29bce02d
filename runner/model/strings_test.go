package model

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

func stringModelSpec(t *testing.T) (jobs.ModelSpec, *testgen.StringModel) {
	t.Helper()
	sm := testgen.NewStringModel(testgen.DefaultSeed)
	path, err := sm.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return jobs.ModelSpec{
		Path:    path,
		Inputs:  map[string]jobs.InputSpec{"cat": {Columns: []string{"country", "device"}}},
		Outputs: map[string]string{"score": "score", "region": "region"},
	}, sm
}

// TestStringInputs feeds two string columns (string and large string) to a
// tensor(string) input and stores the string output as text: every kept
// row equals the pure-Go reference, unknown and Unicode categories
// included, and a null category rejects its row.
func TestStringInputs(t *testing.T) {
	spec, sm := stringModelSpec(t)
	m := loadModel(t, spec)
	if got := m.OutputFields(); len(got) != 2 || got[1].Name != "region" || got[1].Type.ID() != arrow.STRING {
		t.Fatalf("fields %v", got)
	}
	countries := append(append([]string(nil), sm.Countries...), "xx", "", "Köln ", "日本")
	const n = 300
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "device", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	cs, ds := make([]string, n), make([]string, n)
	for r := range n {
		rb.Field(0).(*array.Int64Builder).Append(int64(r))
		cs[r] = countries[r%len(countries)]
		ds[r] = append(sm.Devices, "tv")[r%(len(sm.Devices)+1)]
		if r%97 == 5 {
			rb.Field(1).AppendNull()
		} else {
			rb.Field(1).(*array.StringBuilder).Append(cs[r])
		}
		if r%89 == 7 {
			rb.Field(2).AppendNull()
		} else {
			rb.Field(2).(*array.LargeStringBuilder).Append(ds[r])
		}
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if err := m.CheckSchema(schema); err != nil {
		t.Fatalf("CheckSchema: %v", err)
	}
	b, out := infer(t, m, rec)
	wantRejects := 0
	for r := range n {
		if r%97 == 5 || r%89 == 7 {
			wantRejects++
		}
	}
	if len(b.Rejects) != wantRejects || !strings.Contains(b.Rejects[0].Reason, ": null") {
		t.Fatalf("rejects %v, want %d null rows", b.Rejects, wantRejects)
	}
	scores, regions := out.Column(0).(*array.Float32), out.Column(1).(*array.String)
	for i, r := range b.Rows {
		ws, wr := sm.Reference(cs[r], ds[r])
		if d := math.Abs(float64(scores.Value(i) - ws)); d > 1e-6 || regions.Value(i) != wr {
			t.Fatalf("row %d (%q, %q): score %v region %q, want %v %q", r, cs[r], ds[r], scores.Value(i), regions.Value(i), ws, wr)
		}
	}
}

// TestStringInputErrors: numeric columns cannot feed a string input, a
// list column neither, and each error names the field.
func TestStringInputErrors(t *testing.T) {
	spec, _ := stringModelSpec(t)
	m := loadModel(t, spec)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "country", Type: arrow.PrimitiveTypes.Int64},
		{Name: "device", Type: arrow.BinaryTypes.String},
	}, nil)
	err := m.CheckSchema(schema)
	if err == nil || !strings.Contains(err.Error(), `model.inputs.cat.columns[0]: column "country" is int64, want strings for input "cat"`) {
		t.Fatalf("CheckSchema: %v", err)
	}
	spec.Inputs = map[string]jobs.InputSpec{"cat": {Column: "tags"}}
	if _, err := Load(spec, filepath.Join("x", "job.yaml")); err == nil || !strings.Contains(err.Error(), "model.inputs.cat.column: input \"cat\" is a string tensor") {
		t.Fatalf("Load with a list column: %v", err)
	}
}

// TestRawRunnerStrings: the raw baseline builds string tensors too.
func TestRawRunnerStrings(t *testing.T) {
	spec, _ := stringModelSpec(t)
	m := loadModel(t, spec)
	run, done, err := m.RawRunner(16)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
