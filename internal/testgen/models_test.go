package testgen

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

var (
	ortOnce sync.Once
	ortErr  error
)

// initORT loads ONNX Runtime once for the package's tests; a missing library
// fails the test with instructions instead of skipping it.
func initORT(t testing.TB) {
	t.Helper()
	ortOnce.Do(func() {
		var lib string
		lib, ortErr = ORTLibrary()
		if ortErr != nil {
			return
		}
		ort.SetSharedLibraryPath(lib)
		ortErr = ort.InitializeEnvironment(ort.WithLogLevelError())
	})
	if ortErr != nil {
		t.Fatalf("ONNX Runtime: %v", ortErr)
	}
}

// randomInput makes n rows for m: uniform [-1.5,1.5) floats (beyond the
// quantiser's clip range), or small integers for the integer-typed models.
func randomInput(m *Model, n int, r *rand.Rand) []float32 {
	x := make([]float32, n*m.InputWidth())
	for i := range x {
		switch m.Input.Elem {
		case Int32, Int64:
			x[i] = float32(r.IntN(101) - 50)
		default:
			x[i] = float32(3*r.Float64() - 1.5)
		}
	}
	return x
}

func inputTensor(t *testing.T, m *Model, x []float32, n int) ort.Value {
	t.Helper()
	shape := ort.NewShape(int64(n), int64(m.InputWidth()))
	var (
		v   ort.Value
		err error
	)
	switch m.Input.Elem {
	case Float:
		v, err = ort.NewTensor(shape, x)
	case Double:
		d := make([]float64, len(x))
		for i, f := range x {
			d[i] = float64(f)
		}
		v, err = ort.NewTensor(shape, d)
	case Int32:
		d := make([]int32, len(x))
		for i, f := range x {
			d[i] = int32(f)
		}
		v, err = ort.NewTensor(shape, d)
	case Int64:
		d := make([]int64, len(x))
		for i, f := range x {
			d[i] = int64(f)
		}
		v, err = ort.NewTensor(shape, d)
	default:
		t.Fatalf("model %s: unsupported input type %d", m.Name, m.Input.Elem)
	}
	if err != nil {
		t.Fatalf("model %s: input tensor: %v", m.Name, err)
	}
	return v
}

func TestModelsMatchReference(t *testing.T) {
	initORT(t)
	dir := t.TempDir()
	for _, m := range append(All(), NewNull()) {
		t.Run(m.Name, func(t *testing.T) {
			path := filepath.Join(dir, m.Name+".onnx")
			if err := m.WriteONNX(path); err != nil {
				t.Fatal(err)
			}
			checkIO(t, m, path)

			var tensorOuts []IO
			for _, o := range m.Outputs {
				if !o.Seq {
					tensorOuts = append(tensorOuts, o)
				}
			}
			names := make([]string, len(tensorOuts))
			for i, o := range tensorOuts {
				names[i] = o.Name
			}
			sess, err := ort.NewDynamicAdvancedSession(path, []string{m.Input.Name}, names, nil)
			if err != nil {
				t.Fatalf("load %s: %v", path, err)
			}
			defer sess.Destroy()

			r := rand.New(rand.NewPCG(7, uint64(len(m.Name))))
			sizes := []int{1, 3, 64, 257}
			if m.Input.Dims[0] > 0 {
				sizes = []int{int(m.Input.Dims[0])}
			}
			var maxDiff float64
			for _, n := range sizes {
				x := randomInput(m, n, r)
				in := inputTensor(t, m, x, n)
				outs := make([]ort.Value, len(names))
				if err := sess.Run([]ort.Value{in}, outs); err != nil {
					t.Fatalf("run n=%d: %v", n, err)
				}
				want, err := m.Reference(x, n)
				if err != nil {
					t.Fatal(err)
				}
				for i, o := range tensorOuts {
					d := compareOutput(t, m, o, n, outs[i], want[o.Name], want)
					maxDiff = math.Max(maxDiff, d)
					outs[i].Destroy()
				}
				in.Destroy()
			}
			t.Logf("%s: max |ORT - reference| = %.3g", m.Name, maxDiff)
		})
	}
}

// checkIO verifies the names, element types and shapes ONNX Runtime reads
// from the file against what the Model declares.
func checkIO(t *testing.T, m *Model, path string) {
	t.Helper()
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		t.Fatalf("io info %s: %v", path, err)
	}
	if len(ins) != 1 || ins[0].Name != m.Input.Name || int(ins[0].DataType) != int(m.Input.Elem) {
		t.Fatalf("inputs = %v, want %s of type %d", ins, m.Input.Name, m.Input.Elem)
	}
	if got := []int64(ins[0].Dimensions); !equalInts(got, m.Input.Dims) {
		t.Errorf("input dims = %v, want %v", got, m.Input.Dims)
	}
	if len(outs) != len(m.Outputs) {
		t.Fatalf("outputs = %v, want %d", outs, len(m.Outputs))
	}
	for i, o := range m.Outputs {
		got := outs[i]
		if got.Name != o.Name {
			t.Errorf("output %d = %q, want %q", i, got.Name, o.Name)
		}
		if o.Seq {
			if got.OrtValueType != ort.ONNXTypeSequence {
				t.Errorf("output %s is %v, want a sequence", o.Name, got.OrtValueType)
			}
			continue
		}
		if got.OrtValueType != ort.ONNXTypeTensor || int(got.DataType) != int(o.Elem) {
			t.Errorf("output %s = %v, want tensor of type %d", o.Name, got, o.Elem)
		}
		if !equalInts([]int64(got.Dimensions), o.Dims) {
			t.Errorf("output %s dims = %v, want %v", o.Name, got.Dimensions, o.Dims)
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// compareOutput checks one ORT output against the reference and returns the
// largest absolute difference of a float output.
func compareOutput(t *testing.T, m *Model, o IO, n int, got ort.Value, want Tensor, all map[string]Tensor) float64 {
	t.Helper()
	if !equalInts([]int64(got.GetShape()), want.Shape) {
		t.Fatalf("%s n=%d: shape %v, want %v", o.Name, n, got.GetShape(), want.Shape)
	}
	switch o.Elem {
	case Float:
		g, ok := got.(*ort.Tensor[float32])
		if !ok {
			t.Fatalf("%s: got %T, want float32 tensor", o.Name, got)
		}
		var maxDiff float64
		for i, v := range g.GetData() {
			d := math.Abs(float64(v) - float64(want.Float32[i]))
			if math.IsNaN(d) || d > 1e-4 {
				t.Fatalf("%s n=%d: element %d = %v, reference %v", o.Name, n, i, v, want.Float32[i])
			}
			maxDiff = math.Max(maxDiff, d)
		}
		if m.Name == "recs" && maxDiff != 0 {
			t.Errorf("recs scores must be exact, max diff %g", maxDiff)
		}
		return maxDiff
	case Int64:
		g, ok := got.(*ort.Tensor[int64])
		if !ok {
			t.Fatalf("%s: got %T, want int64 tensor", o.Name, got)
		}
		for i, v := range g.GetData() {
			if v == want.Int64[i] {
				continue
			}
			// A classifier's label may differ only where both classes are
			// within rounding of 0.5.
			if p := all["probabilities"].Float32; o.Name == "label" && math.Abs(float64(p[2*i]-p[2*i+1])) < 1e-5 {
				continue
			}
			t.Fatalf("%s n=%d: element %d = %d, reference %d", o.Name, n, i, v, want.Int64[i])
		}
	}
	return 0
}

// TestRecsTies checks that the integer-valued recs model produces ties in
// practice and that ORT breaks them exactly like the reference (lower item
// id first), i.e. that the exactness argument holds for rows with ties.
func TestRecsTies(t *testing.T) {
	m := NewRecs(DefaultSeed)
	x := randomInput(m, 200, rand.New(rand.NewPCG(1, 2)))
	want, err := m.Reference(x, 200)
	if err != nil {
		t.Fatal(err)
	}
	s := want["topk_scores"].Float32
	ids := want["topk_items"].Int64
	ties := 0
	for i := 1; i < len(s); i++ {
		if i%RecsK == 0 {
			continue
		}
		if s[i] > s[i-1] {
			t.Fatalf("scores not descending at %d: %v > %v", i, s[i], s[i-1])
		}
		if s[i] == s[i-1] {
			ties++
			if ids[i] < ids[i-1] {
				t.Fatalf("tie at %d not broken by lower id: %d before %d", i, ids[i-1], ids[i])
			}
		}
	}
	t.Logf("%d tied neighbours in 200 rows (ORT agreement on them is checked by TestModelsMatchReference)", ties)
}

func TestModelFilesDeterministic(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"ranker", "recs", "classifier_zipmap"} {
		a, err := Write(filepath.Join(dir, "a"), name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Write(filepath.Join(dir, "b"), name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mustRead(t, a), mustRead(t, b)) {
			t.Errorf("%s: two writes differ", name)
		}
	}
	r1, _ := NewRanker(1).ONNX()
	r2, _ := NewRanker(2).ONNX()
	if bytes.Equal(r1, r2) {
		t.Error("ranker weights do not depend on the seed")
	}
}

func TestReferenceRejectsBadLength(t *testing.T) {
	if _, err := NewRanker(1).Reference(make([]float32, 15), 1); err == nil {
		t.Fatal("15 values for one 16-feature row: want error")
	}
	if _, err := Get("nope"); err == nil {
		t.Fatal("unknown model: want error")
	}
}

func TestGraphBuilderError(t *testing.T) {
	g := NewGraph("bad")
	g.Initializer("w", []int64{2, 2}, []float32{1, 2, 3})
	if _, err := NewModelProto(g).Marshal(); err == nil {
		t.Fatal("3 values for dims [2 2]: want error")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
