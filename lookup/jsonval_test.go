package lookup

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestArrowJSONFloat32 renders float32 outputs (a score and a vector) as
// strconv's shortest 32-bit text, the bytes the Redis sink stores for the
// same values, and refuses NaN and ±Inf, which JSON cannot carry.
func TestArrowJSONFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	vals := []float32{0, -1, 0.1, 1e-5, 123456, 1e6, 3.4028235e38, 1e-45}
	for range 2000 {
		vals = append(vals, float32(r.NormFloat64()), math.Float32frombits(r.Uint32()&0x7f7fffff))
	}
	want := func(vs []float32) string {
		parts := make([]string, len(vs))
		for i, f := range vs {
			parts[i] = strconv.FormatFloat(float64(f), 'g', -1, 32)
		}
		return strings.Join(parts, ",")
	}

	sb := array.NewFloat32Builder(memory.DefaultAllocator)
	sb.AppendValues(vals, nil)
	scores := sb.NewFloat32Array()
	defer scores.Release()
	for i, f := range vals {
		got, err := arrowJSON(nil, scores, i)
		if err != nil || string(got) != want([]float32{f}) {
			t.Fatalf("score %#08x: %s, %v; want %s", math.Float32bits(f), got, err, want([]float32{f}))
		}
	}

	lb := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Float32)
	lb.Append(true)
	lb.ValueBuilder().(*array.Float32Builder).AppendValues(vals, nil)
	lb.Append(true)
	lb.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{1.5, float32(math.Inf(-1)), 2}, nil)
	lists := lb.NewListArray()
	defer lists.Release()
	defer lb.Release()
	if got, err := arrowJSON(nil, lists, 0); err != nil || string(got) != "["+want(vals)+"]" {
		t.Fatalf("vector: %.80s…, %v; want %.80s…", got, err, "["+want(vals)+"]")
	}
	if _, err := arrowJSON(nil, lists, 1); err == nil || !strings.Contains(err.Error(), "non-finite value -Inf") {
		t.Fatalf("vector with -Inf: %v; want a non-finite value error", err)
	}
	sb.Append(float32(math.NaN()))
	nan := sb.NewFloat32Array()
	defer nan.Release()
	defer sb.Release()
	if _, err := arrowJSON(nil, nan, 0); err == nil || !strings.Contains(err.Error(), "non-finite value NaN") {
		t.Fatalf("NaN score: %v; want a non-finite value error", err)
	}
}
