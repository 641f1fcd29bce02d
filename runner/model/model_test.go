package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

func TestMain(m *testing.M) {
	// The runtime is real in every test: a missing library fails the run.
	if os.Getenv(EnvLibrary) == "" {
		lib, err := testgen.ORTLibrary()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv(EnvLibrary, lib)
	}
	os.Exit(m.Run())
}

var (
	modelDirOnce sync.Once
	modelDir     string
	modelDirErr  error
)

// modelPath writes the testgen model name once per test binary.
func modelPath(t testing.TB, name string) string {
	t.Helper()
	modelDirOnce.Do(func() {
		modelDir, modelDirErr = os.MkdirTemp("", "precog-model-test-")
		if modelDirErr != nil {
			return
		}
		for _, n := range testgen.Names() {
			if _, err := testgen.Write(modelDir, n); err != nil {
				modelDirErr = err
				return
			}
		}
	})
	if modelDirErr != nil {
		t.Fatal(modelDirErr)
	}
	return filepath.Join(modelDir, name+".onnx")
}

func testModel(t testing.TB, name string) *testgen.Model {
	t.Helper()
	m, err := testgen.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func columnNames(k int) []string {
	c := make([]string, k)
	for i := range c {
		c[i] = testgen.FeatureColumn(i)
	}
	return c
}

// specFor maps every input of a testgen model to f0..fk-1 and every tensor
// output to a field of the same name.
func specFor(t testing.TB, name string) jobs.ModelSpec {
	t.Helper()
	tm := testModel(t, name)
	outs := map[string]string{}
	for _, o := range tm.Outputs {
		if !o.Seq {
			outs[o.Name] = o.Name
		}
	}
	return jobs.ModelSpec{
		Path:    modelPath(t, name),
		Inputs:  map[string]jobs.InputSpec{tm.Input.Name: {Columns: columnNames(tm.InputWidth())}},
		Outputs: outs,
	}
}

func loadModel(t testing.TB, spec jobs.ModelSpec) *Model {
	t.Helper()
	m, err := Load(spec, "job.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// features makes n rows × k values: uniform [-1.5, 1.5), or small integers.
func features(n, k int, ints bool, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 99))
	x := make([]float32, n*k)
	for i := range x {
		if ints {
			x[i] = float32(r.IntN(101) - 50)
		} else {
			x[i] = float32(3*r.Float64() - 1.5)
		}
	}
	return x
}

// appendValue appends v to a builder of any numeric type.
func appendValue(b array.Builder, v float64) {
	switch b := b.(type) {
	case *array.Float32Builder:
		b.Append(float32(v))
	case *array.Float64Builder:
		b.Append(v)
	case *array.Int8Builder:
		b.Append(int8(v))
	case *array.Int16Builder:
		b.Append(int16(v))
	case *array.Int32Builder:
		b.Append(int32(v))
	case *array.Int64Builder:
		b.Append(int64(v))
	case *array.Uint8Builder:
		b.Append(uint8(v))
	case *array.Uint32Builder:
		b.Append(uint32(v))
	case *array.Uint64Builder:
		b.Append(uint64(v))
	default:
		panic(fmt.Sprintf("appendValue: %T", b))
	}
}

// columnsRecord holds x (n × k) as columns f0..fk-1 of type dt, plus a key.
// null[(row,col)] makes that cell null.
func columnsRecord(x []float32, n, k int, dt arrow.DataType, null map[[2]int]bool) arrow.RecordBatch {
	fields := []arrow.Field{{Name: "user_id", Type: arrow.PrimitiveTypes.Int64}}
	for j := range k {
		fields = append(fields, arrow.Field{Name: testgen.FeatureColumn(j), Type: dt, Nullable: true})
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for r := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(r))
		for j := range k {
			if null[[2]int{r, j}] {
				b.Field(j + 1).AppendNull()
				continue
			}
			appendValue(b.Field(j+1), float64(x[r*k+j]))
		}
	}
	return b.NewRecordBatch()
}

// listRecord holds x as one list column "features"; fixed makes it a
// fixed-size list. lens overrides a row's length; nullRows are null lists.
func listRecord(x []float32, n, k int, fixed bool, lens map[int]int, nullRows map[int]bool) arrow.RecordBatch {
	var dt arrow.DataType = arrow.ListOf(arrow.PrimitiveTypes.Float32)
	if fixed {
		dt = arrow.FixedSizeListOf(int32(k), arrow.PrimitiveTypes.Float32)
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "features", Type: dt, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	lb := b.Field(0).(array.ListLikeBuilder)
	vb := lb.ValueBuilder().(*array.Float32Builder)
	for r := range n {
		if nullRows[r] {
			lb.AppendNull()
			continue
		}
		l := k
		if v, ok := lens[r]; ok {
			l = v
		}
		if fixed {
			lb.Append(true)
		} else {
			lb.(*array.ListBuilder).AppendWithSize(true, l)
		}
		for j := range l {
			if j < k {
				vb.Append(x[r*k+j])
			} else {
				vb.Append(0)
			}
		}
	}
	return b.NewRecordBatch()
}

func infer(t *testing.T, m *Model, rec arrow.RecordBatch) (*Batch, arrow.RecordBatch) {
	t.Helper()
	b, err := m.Encode(rec)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	t.Cleanup(b.Release)
	out, err := m.Infer(context.Background(), b)
	if err != nil {
		t.Fatalf("Infer: %v", err)
	}
	t.Cleanup(out.Release)
	if got, want := out.NumRows(), int64(len(b.Rows)); got != want {
		t.Fatalf("Infer: %d rows, want %d", got, want)
	}
	if !out.Schema().Equal(arrow.NewSchema(m.OutputFields(), nil)) {
		t.Fatalf("Infer schema %v, want fields %v", out.Schema(), m.OutputFields())
	}
	return b, out
}

// values flattens an output column (scalar or list) to float64 per row.
func values(t *testing.T, col arrow.Array) [][]float64 {
	t.Helper()
	scalar := func(a arrow.Array, i int) float64 {
		switch a := a.(type) {
		case *array.Float32:
			return float64(a.Value(i))
		case *array.Float64:
			return a.Value(i)
		case *array.Int32:
			return float64(a.Value(i))
		case *array.Int64:
			return float64(a.Value(i))
		}
		t.Fatalf("unexpected column type %T", a)
		return 0
	}
	out := make([][]float64, col.Len())
	for r := range out {
		if l, ok := col.(*array.List); ok {
			s, e := l.ValueOffsets(r)
			for i := s; i < e; i++ {
				out[r] = append(out[r], scalar(l.ListValues(), int(i)))
			}
			continue
		}
		out[r] = []float64{scalar(col, r)}
	}
	return out
}

// checkAgainstReference compares every stored output with the model's
// pure-Go reference on the kept rows of x.
func checkAgainstReference(t *testing.T, tm *testgen.Model, x []float32, k int, rows []int, out arrow.RecordBatch) {
	t.Helper()
	kept := make([]float32, 0, len(rows)*k)
	for _, r := range rows {
		kept = append(kept, x[r*k:(r+1)*k]...)
	}
	ref, err := tm.Reference(kept, len(rows))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range out.Schema().Fields() {
		want, ok := ref[f.Name]
		if !ok {
			t.Fatalf("no reference for output %q", f.Name)
		}
		got := values(t, out.Column(i))
		w := 1
		if len(want.Shape) == 2 {
			w = int(want.Shape[1])
		}
		for r := range got {
			if len(got[r]) != w {
				t.Fatalf("%s row %d: %d values, want %d", f.Name, r, len(got[r]), w)
			}
			for j, g := range got[r] {
				if want.Int64 != nil {
					if int64(g) != want.Int64[r*w+j] {
						t.Fatalf("%s row %d [%d]: %v, want %d (exact)", f.Name, r, j, g, want.Int64[r*w+j])
					}
					continue
				}
				if d := math.Abs(g - float64(want.Float32[r*w+j])); d > 1e-4 {
					t.Fatalf("%s row %d [%d]: %v, want %v (|Δ| %g)", f.Name, r, j, g, want.Float32[r*w+j], d)
				}
			}
		}
	}
}

func identity(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

func TestOutputsMatchReference(t *testing.T) {
	for _, tc := range []struct {
		model string
		n     int
		dt    arrow.DataType
		ints  bool
	}{
		{"ranker", 300, arrow.PrimitiveTypes.Float32, false},
		{"ranker", 1, arrow.PrimitiveTypes.Float64, false}, // float64 columns into a float32 input
		{"embedder", 130, arrow.PrimitiveTypes.Float32, false},
		{"recs", 200, arrow.PrimitiveTypes.Float32, false},
		{"heavy", 20, arrow.PrimitiveTypes.Float32, false},
		{"typed_float64", 50, arrow.PrimitiveTypes.Float64, false},
		{"typed_float64", 50, arrow.PrimitiveTypes.Float32, false},
		{"typed_int32", 50, arrow.PrimitiveTypes.Int32, true},
		{"typed_int32", 50, arrow.PrimitiveTypes.Int8, true},
		{"typed_int64", 50, arrow.PrimitiveTypes.Int64, true},
		{"typed_int64", 50, arrow.PrimitiveTypes.Int16, true},
		{"classifier_zipmap", 40, arrow.PrimitiveTypes.Float32, false},
		{"ranker_static8", 21, arrow.PrimitiveTypes.Float32, false}, // fixed batch 8: 3 runs, last padded
		{"ranker_static8", 8, arrow.PrimitiveTypes.Float32, false},
	} {
		t.Run(fmt.Sprintf("%s/%s/%d", tc.model, tc.dt, tc.n), func(t *testing.T) {
			tm := testModel(t, tc.model)
			m := loadModel(t, specFor(t, tc.model))
			k := tm.InputWidth()
			x := features(tc.n, k, tc.ints, uint64(tc.n))
			b, out := infer(t, m, columnsRecord(x, tc.n, k, tc.dt, nil))
			if len(b.Rejects) != 0 {
				t.Fatalf("rejects: %v", b.Rejects)
			}
			checkAgainstReference(t, tm, x, k, identity(tc.n), out)
		})
	}
}

func TestListColumns(t *testing.T) {
	tm := testModel(t, "recs")
	k := tm.InputWidth()
	spec := specFor(t, "recs")
	spec.Inputs = map[string]jobs.InputSpec{"features": {Column: "features"}}
	m := loadModel(t, spec)
	n := 100
	x := features(n, k, false, 5)
	for _, fixed := range []bool{true, false} {
		t.Run(fmt.Sprintf("fixed=%v", fixed), func(t *testing.T) {
			rec := listRecord(x, n, k, fixed, nil, nil)
			defer rec.Release()
			if err := m.CheckSchema(rec.Schema()); err != nil {
				t.Fatal(err)
			}
			b, out := infer(t, m, rec)
			if len(b.Rejects) != 0 {
				t.Fatalf("rejects: %v", b.Rejects)
			}
			checkAgainstReference(t, tm, x, k, identity(n), out)
			// A sliced record (non-zero array offsets) reads the right rows.
			sl := rec.NewSlice(10, 30)
			defer sl.Release()
			_, out2 := infer(t, m, sl)
			checkAgainstReference(t, tm, x[10*k:30*k], k, identity(20), out2)
		})
	}
}

func TestRejects(t *testing.T) {
	tm := testModel(t, "ranker")
	k := tm.InputWidth()
	n := 12
	x := features(n, k, false, 3)
	x[5*k+3] = float32(math.NaN())
	x[7*k+0] = float32(math.Inf(1))
	x[7*k+1] = float32(math.NaN()) // second bad value of the same row: one reject
	x[9*k+15] = float32(math.Inf(-1))

	t.Run("columns", func(t *testing.T) {
		m := loadModel(t, specFor(t, "ranker"))
		rec := columnsRecord(x, n, k, arrow.PrimitiveTypes.Float32, map[[2]int]bool{{2, 4}: true, {11, 0}: true})
		defer rec.Release()
		b, out := infer(t, m, rec)
		want := []Reject{
			{2, "f4", "column f4: null"},
			{5, "f3", "column f3: NaN"},
			{7, "f0", "column f0: +Inf"},
			{9, "f15", "column f15: -Inf"},
			{11, "f0", "column f0: null"},
		}
		if fmt.Sprint(b.Rejects) != fmt.Sprint(want) {
			t.Fatalf("rejects\n got %v\nwant %v", b.Rejects, want)
		}
		wantRows := []int{0, 1, 3, 4, 6, 8, 10}
		if fmt.Sprint(b.Rows) != fmt.Sprint(wantRows) {
			t.Fatalf("rows %v, want %v", b.Rows, wantRows)
		}
		checkAgainstReference(t, tm, x, k, wantRows, out)
	})

	t.Run("list", func(t *testing.T) {
		spec := specFor(t, "ranker")
		spec.Inputs = map[string]jobs.InputSpec{"features": {Column: "features"}}
		m := loadModel(t, spec)
		rec := listRecord(x, n, k, false, map[int]int{1: 15, 10: 17}, map[int]bool{4: true})
		defer rec.Release()
		b, out := infer(t, m, rec)
		want := []Reject{
			{1, "features", "column features: length 15, want 16"},
			{4, "features", "column features: null"},
			{5, "features", "column features[3]: NaN"},
			{7, "features", "column features[0]: +Inf"},
			{9, "features", "column features[15]: -Inf"},
			{10, "features", "column features: length 17, want 16"},
		}
		if fmt.Sprint(b.Rejects) != fmt.Sprint(want) {
			t.Fatalf("rejects\n got %v\nwant %v", b.Rejects, want)
		}
		wantRows := []int{0, 2, 3, 6, 8, 11}
		if fmt.Sprint(b.Rows) != fmt.Sprint(wantRows) {
			t.Fatalf("rows %v, want %v", b.Rows, wantRows)
		}
		checkAgainstReference(t, tm, x, k, wantRows, out)
	})

	t.Run("int range", func(t *testing.T) {
		m := loadModel(t, specFor(t, "typed_int32"))
		xi := features(3, 4, true, 1)
		rec := columnsRecord(xi, 3, 4, arrow.PrimitiveTypes.Int64, nil)
		defer rec.Release()
		// Replace f2 of row 1 with a value beyond int32.
		bld := array.NewInt64Builder(memory.DefaultAllocator)
		defer bld.Release()
		bld.AppendValues([]int64{1, 3_000_000_000, 2}, nil)
		col := bld.NewArray()
		defer col.Release()
		rec2, err := rec.SetColumn(3, col)
		if err != nil {
			t.Fatal(err)
		}
		defer rec2.Release()
		b, _ := infer(t, m, rec2)
		want := []Reject{{1, "f2", "column f2: 3000000000 out of range for int32"}}
		if fmt.Sprint(b.Rejects) != fmt.Sprint(want) {
			t.Fatalf("rejects %v, want %v", b.Rejects, want)
		}
	})

	t.Run("all rejected", func(t *testing.T) {
		m := loadModel(t, specFor(t, "recs"))
		all := map[[2]int]bool{}
		for r := range 5 {
			all[[2]int{r, 0}] = true
		}
		rec := columnsRecord(features(5, 16, false, 1), 5, 16, arrow.PrimitiveTypes.Float32, all)
		defer rec.Release()
		b, out := infer(t, m, rec)
		if len(b.Rejects) != 5 || out.NumRows() != 0 || out.NumCols() != 2 {
			t.Fatalf("%d rejects, %d rows × %d cols; want 5, 0 × 2", len(b.Rejects), out.NumRows(), out.NumCols())
		}
	})
}

func TestInspect(t *testing.T) {
	info, err := Inspect(modelPath(t, "classifier_zipmap"))
	if err != nil {
		t.Fatal(err)
	}
	want := Info{
		Inputs: []TensorInfo{{Name: "features", Type: "float32", Shape: []int64{-1, 4}, Tensor: true}},
		Outputs: []TensorInfo{
			{Name: "label", Type: "int64", Shape: []int64{-1}, Tensor: true},
			{Name: "probabilities", Type: "float32", Shape: []int64{-1, 2}, Tensor: true},
			{Name: "output_probability", Type: "sequence<map<int64,float32>>"},
		},
	}
	if fmt.Sprintf("%+v", info) != fmt.Sprintf("%+v", want) {
		t.Fatalf("Inspect\n got %+v\nwant %+v", info, want)
	}
	s := info.String()
	for _, frag := range []string{"inputs:", "features  float32  [N,4]", "outputs:", "output_probability  sequence<map<int64,float32>>"} {
		if !strings.Contains(s, frag) {
			t.Errorf("String() lacks %q:\n%s", frag, s)
		}
	}
	// Every testgen model: our parser agrees with the generator's declared I/O.
	for _, tm := range testgen.All() {
		info, err := Inspect(modelPath(t, tm.Name))
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Inputs) != 1 || info.Inputs[0].Name != tm.Input.Name || fmt.Sprint(info.Inputs[0].Shape) != fmt.Sprint(tm.Input.Dims) {
			t.Errorf("%s: inputs %+v, want %+v", tm.Name, info.Inputs, tm.Input)
		}
		if len(info.Outputs) != len(tm.Outputs) {
			t.Fatalf("%s: outputs %+v, want %+v", tm.Name, info.Outputs, tm.Outputs)
		}
		for i, o := range tm.Outputs {
			if g := info.Outputs[i]; g.Name != o.Name || g.Tensor == o.Seq || (!o.Seq && fmt.Sprint(g.Shape) != fmt.Sprint(o.Dims)) {
				t.Errorf("%s: output %d %+v, want %+v", tm.Name, i, g, o)
			}
		}
	}
}

func TestInspectBadFiles(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "model.onnx")
	os.WriteFile(text, []byte("this is not a model\n"), 0o644)
	empty := filepath.Join(dir, "empty.onnx")
	os.WriteFile(empty, nil, 0o644)
	missing := filepath.Join(dir, "missing.onnx")
	for _, tc := range []struct{ path, frag string }{
		{text, text + ": not an ONNX model"},
		{empty, empty + ": not an ONNX model"},
		{missing, missing + ": no such file"},
	} {
		if _, err := Inspect(tc.path); err == nil || !strings.Contains(err.Error(), tc.frag) {
			t.Errorf("Inspect(%s) = %v, want error containing %q", tc.path, err, tc.frag)
		}
		spec := specFor(t, "ranker")
		spec.Path = tc.path
		if _, err := Load(spec, "job.yaml"); err == nil || !strings.Contains(err.Error(), "job.yaml: model.path: ") || !strings.Contains(err.Error(), tc.frag) {
			t.Errorf("Load(%s) = %v, want error with model.path and %q", tc.path, err, tc.frag)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	recs := modelPath(t, "recs")
	for _, tc := range []struct {
		name   string
		model  string
		edit   func(s *jobs.ModelSpec)
		errMsg string
	}{
		{"input name", "recs", func(s *jobs.ModelSpec) {
			s.Inputs = map[string]jobs.InputSpec{"featurez": {Columns: columnNames(16)}}
		}, `job.yaml: model.inputs.featurez: no input "featurez" in ` + recs + ` (inputs: features)`},
		{"input unmapped", "recs", func(s *jobs.ModelSpec) { s.Inputs = nil },
			`model.inputs: required: map each model input to columns (inputs of ` + recs + `: features)`},
		{"column count", "recs", func(s *jobs.ModelSpec) {
			s.Inputs = map[string]jobs.InputSpec{"features": {Columns: columnNames(15)}}
		}, `model.inputs.features.columns: 15 columns but input "features" has shape [N,16]`},
		{"both columns and column", "recs", func(s *jobs.ModelSpec) {
			s.Inputs = map[string]jobs.InputSpec{"features": {Columns: columnNames(16), Column: "x"}}
		}, `model.inputs.features: set exactly one of columns`},
		{"output name", "recs", func(s *jobs.ModelSpec) { s.Outputs = map[string]string{"topk": "items"} },
			`model.outputs.topk: no output "topk" in ` + recs + ` (outputs: topk_items, topk_scores)`},
		{"no outputs", "recs", func(s *jobs.ModelSpec) { s.Outputs = nil }, `model.outputs: required`},
		{"duplicate field", "recs", func(s *jobs.ModelSpec) {
			s.Outputs = map[string]string{"topk_items": "x", "topk_scores": "x"}
		}, `model.outputs.topk_scores: field "x" is already the field of output "topk_items"`},
		{"bad device", "recs", func(s *jobs.ModelSpec) { s.Device = "gpu" }, `model.device: "gpu" is not cpu or cuda:N`},
		{"cuda on cpu build", "recs", func(s *jobs.ModelSpec) { s.Device = "cuda:0" },
			`model.device: cuda:0 requested but this ONNX Runtime build has no CUDA execution provider`},
		{"negative threads", "recs", func(s *jobs.ModelSpec) { s.Threads = -1 }, `model.threads: -1 is negative`},
		{"negative sessions", "recs", func(s *jobs.ModelSpec) { s.Sessions = -2 }, `model.sessions: -2 is negative`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := specFor(t, tc.model)
			tc.edit(&spec)
			m, err := Load(spec, "job.yaml")
			if err == nil {
				m.Close()
				t.Fatalf("Load succeeded, want error %q", tc.errMsg)
			}
			if !strings.Contains(err.Error(), tc.errMsg) {
				t.Fatalf("error\n %v\nwant it to contain\n %s", err, tc.errMsg)
			}
		})
	}
}

func TestCheckSchema(t *testing.T) {
	cols := columnsRecord(features(1, 16, false, 1), 1, 16, arrow.PrimitiveTypes.Float32, nil)
	defer cols.Release()
	spec := specFor(t, "ranker")
	m := loadModel(t, spec)
	if err := m.CheckSchema(cols.Schema()); err != nil {
		t.Fatalf("CheckSchema: %v", err)
	}

	withField := func(f arrow.Field) *arrow.Schema {
		return arrow.NewSchema(append(cols.Schema().Fields(), f), nil)
	}
	for _, tc := range []struct {
		name    string
		model   string
		inputs  map[string]jobs.InputSpec
		schema  *arrow.Schema
		wantErr string
	}{
		{"missing column", "ranker", map[string]jobs.InputSpec{"features": {Columns: append(columnNames(3), "f3x", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11", "f12", "f13", "f14", "f15")}}, cols.Schema(),
			`job.yaml: model.inputs.features.columns[3]: column "f3x" not in source schema (have: f0..f15, user_id)`},
		{"string column", "ranker", map[string]jobs.InputSpec{"features": {Columns: append(columnNames(15), "name")}},
			withField(arrow.Field{Name: "name", Type: arrow.BinaryTypes.String}),
			`model.inputs.features.columns[15]: column "name" is utf8, want numbers`},
		{"float into int", "typed_int64", map[string]jobs.InputSpec{"features": {Columns: columnNames(4)}}, cols.Schema(),
			`model.inputs.features.columns[0]: column "f0" is float32 but input "features" is int64`},
		{"fixed size mismatch", "ranker", map[string]jobs.InputSpec{"features": {Column: "emb"}},
			withField(arrow.Field{Name: "emb", Type: arrow.FixedSizeListOf(32, arrow.PrimitiveTypes.Float32)}),
			`model.inputs.features.column: column "emb" is fixed_size_list<item: float32, nullable>[32] but input "features" has shape [N,16]`},
		{"list of strings", "ranker", map[string]jobs.InputSpec{"features": {Column: "tags"}},
			withField(arrow.Field{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String)}),
			`column "tags" is list<item: utf8, nullable>, want numbers`},
		{"not a list", "ranker", map[string]jobs.InputSpec{"features": {Column: "f0"}}, cols.Schema(),
			`model.inputs.features.column: column "f0" is float32, want a list or fixed-size list`},
		{"missing list", "ranker", map[string]jobs.InputSpec{"features": {Column: "emb"}}, cols.Schema(),
			`model.inputs.features.column: column "emb" not in source schema`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := specFor(t, tc.model)
			spec.Inputs = tc.inputs
			m := loadModel(t, spec)
			err := m.CheckSchema(tc.schema)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckSchema = %v, want error containing\n %s", err, tc.wantErr)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	spec := specFor(t, "ranker")
	m := loadModel(t, spec)
	rec := columnsRecord(features(2, 15, false, 1), 2, 15, arrow.PrimitiveTypes.Float32, nil)
	defer rec.Release()
	if _, err := m.Encode(rec); err == nil || !strings.Contains(err.Error(), `model.inputs.features.columns[15]: column "f15" not in batch (have: f0..f14, user_id)`) {
		t.Fatalf("Encode = %v", err)
	}
}

func TestModelInfo(t *testing.T) {
	spec := specFor(t, "recs")
	spec.Outputs = map[string]string{"topk_scores": "scores", "topk_items": "items"}
	m := loadModel(t, spec)
	data, err := os.ReadFile(spec.Path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if got, want := m.Version(), hex.EncodeToString(sum[:])[:12]; got != want {
		t.Errorf("Version %q, want %q", got, want)
	}
	fields := fmt.Sprint(m.OutputFields())
	want := fmt.Sprint([]arrow.Field{
		{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	})
	if fields != want {
		t.Errorf("OutputFields %s, want %s", fields, want)
	}
	if got := fmt.Sprint(m.InputColumns()); got != fmt.Sprint(columnNames(16)) {
		t.Errorf("InputColumns %s", got)
	}
	if got := fmt.Sprintf("%+v", m.Inputs()); got != fmt.Sprintf("%+v", []InputInfo{{Name: "features", Type: "float32", Columns: columnNames(16), Width: 16}}) {
		t.Errorf("Inputs %s", got)
	}
	spec.Version = "v7"
	spec.Outputs = map[string]string{"topk_items": "items"}
	m2 := loadModel(t, spec)
	if m2.Version() != "v7" || len(m2.OutputFields()) != 1 {
		t.Errorf("Version %q, fields %v", m2.Version(), m2.OutputFields())
	}
	zm := loadModel(t, specFor(t, "classifier_zipmap"))
	if got := fmt.Sprint(zm.OutputFields()); got != fmt.Sprint([]arrow.Field{
		{Name: "label", Type: arrow.PrimitiveTypes.Int64},
		{Name: "probabilities", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	}) {
		t.Errorf("zipmap fields %s", got)
	}
}

func TestConcurrentInfer(t *testing.T) {
	tm := testModel(t, "embedder")
	spec := specFor(t, "embedder")
	spec.Sessions = 2
	spec.Threads = 2
	m := loadModel(t, spec)
	k := tm.InputWidth()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				n := 20 + 7*g + i
				x := features(n, k, false, uint64(g*10+i))
				rec := columnsRecord(x, n, k, arrow.PrimitiveTypes.Float32, nil)
				b, err := m.Encode(rec)
				rec.Release()
				if err != nil {
					errs <- err
					return
				}
				out, err := m.Infer(context.Background(), b)
				b.Release()
				if err != nil {
					errs <- err
					return
				}
				ref, _ := tm.Reference(x, n)
				got := out.Column(0).(*array.List).ListValues().(*array.Float32).Float32Values()
				for j, v := range ref["embedding"].Float32 {
					if math.Abs(float64(v-got[j])) > 1e-4 {
						errs <- fmt.Errorf("goroutine %d batch %d value %d: %v, want %v", g, i, j, got[j], v)
						out.Release()
						return
					}
				}
				out.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCancelAndClose(t *testing.T) {
	tm := testModel(t, "heavy")
	spec := specFor(t, "heavy")
	spec.Sessions = 1 // the test holds the only session
	m, err := Load(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	k := tm.InputWidth()
	rec := columnsRecord(features(4, k, false, 1), 4, k, arrow.PrimitiveTypes.Float32, nil)
	defer rec.Release()
	b, err := m.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()

	// Hold the only session: a cancelled context stops the wait.
	s, err := m.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.Infer(ctx, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Infer with a busy pool and expiring ctx = %v, want deadline exceeded", err)
	}
	m.release(s)

	// A run cancelled mid-way returns the context's error, and the session
	// stays usable.
	big := 20000
	bigRec := columnsRecord(features(big, k, false, 2), big, k, arrow.PrimitiveTypes.Float32, nil)
	defer bigRec.Release()
	bb, err := m.Encode(bigRec)
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Release()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if _, err := m.Infer(ctx2, bb); !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("run finished before the deadline (%v): %v", time.Since(start), err)
	}
	out, err := m.Infer(context.Background(), b)
	if err != nil {
		t.Fatalf("Infer after a cancelled run: %v", err)
	}
	out.Release()

	// Closed: Infer fails instead of hanging.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Infer(context.Background(), b); err == nil || !strings.Contains(err.Error(), "model closed") {
		t.Fatalf("Infer after Close = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRawRunner(t *testing.T) {
	for _, name := range []string{"recs", "ranker_static8", "typed_int64"} {
		m := loadModel(t, specFor(t, name))
		run, done, err := m.RawRunner(64)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := run(); err != nil {
				t.Fatal(err)
			}
		}
		done()
	}
}

func TestCompressNames(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"user_id", "f2", "f0", "f1", "f10", "f3"}, "f0..f3, f10, user_id"},
		{[]string{"a1", "a2", "b", "x01", "x02", "x03"}, "a1, a2, b, x01, x02, x03"},
		{nil, ""},
	} {
		if got := compressNames(tc.in); got != tc.want {
			t.Errorf("compressNames(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestInitBadLibrary runs Init in a child process (Init runs once per
// process) with PRECOG_ORT_LIB pointing at files that are not the library.
func TestInitBadLibrary(t *testing.T) {
	if os.Getenv("PRECOG_MODEL_INIT_CHILD") == "1" {
		err := Init()
		fmt.Printf("INIT: %v\n", err)
		return
	}
	dir := t.TempDir()
	notLib := filepath.Join(dir, "libonnxruntime.so.1")
	os.WriteFile(notLib, []byte("not an ELF file"), 0o644)
	for _, path := range []string{notLib, filepath.Join(dir, "missing.so")} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInitBadLibrary$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PRECOG_MODEL_INIT_CHILD=1", EnvLibrary+"="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		want := "INIT: onnx runtime: load " + path + " (set PRECOG_ORT_LIB to the library from `make ort`): "
		if !strings.Contains(string(out), want) {
			t.Errorf("child output\n%s\nwant it to contain\n%s", out, want)
		}
	}
}

func TestFindLibrary(t *testing.T) {
	t.Setenv(EnvLibrary, "/opt/ort/libonnxruntime.so.1")
	if got := findLibrary(); got != "/opt/ort/libonnxruntime.so.1" {
		t.Errorf("with %s set: %s", EnvLibrary, got)
	}
	// Unset: found by searching upward from the working directory
	// (runner/model) to the module root's .cache.
	t.Setenv(EnvLibrary, "")
	root, err := testgen.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := findLibrary(), filepath.Join(root, testgen.DefaultORTLib); got != want {
		t.Errorf("search found %s, want %s", got, want)
	}
}
