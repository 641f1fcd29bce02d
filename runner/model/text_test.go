package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model/tokenizer"
)

// textCorpus is length-skewed: mostly short titles, some long ones, with
// accents, CJK and emoji.
func textCorpus(n int) []string {
	short := []string{"blue shoe", "Café naïve", "東京の本", "red cat 😀", "usb-c cable", "the quick brown fox", "wireless headset"}
	out := make([]string, n)
	for i := range out {
		out[i] = short[i%len(short)]
		if i%9 == 4 {
			out[i] = strings.Repeat("the lazy dog jumps over the green jacket, ", 1+i%7)
		}
	}
	return out
}

func textSpec(t testing.TB, pooling jobs.Pooling, normalize jobs.Normalization, maxLen int) (jobs.ModelSpec, *testgen.TextEmbedder, *tokenizer.Tokenizer) {
	t.Helper()
	return textSpecFor(t, testgen.NewTextEmbedder(testgen.DefaultSeed), pooling, normalize, maxLen)
}

func textSpecFor(t testing.TB, tm *testgen.TextEmbedder, pooling jobs.Pooling, normalize jobs.Normalization, maxLen int) (jobs.ModelSpec, *testgen.TextEmbedder, *tokenizer.Tokenizer) {
	t.Helper()
	dir := t.TempDir()
	path, err := tm.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return jobs.ModelSpec{
		Path: path,
		Inputs: map[string]jobs.InputSpec{
			"input_ids":      {Text: jobs.TextColumns{"title"}, Tokenizer: filepath.Join(dir, "tokenizer.json"), MaxLength: maxLen},
			"attention_mask": {MaskOf: "input_ids"},
		},
		Outputs:   map[string]string{"last_hidden_state": "embedding"},
		Pooling:   pooling,
		Normalize: normalize,
	}, tm, tok
}

func titlesRecord(titles []string, null map[int]bool) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "title", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i, s := range titles {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if null[i] {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(s)
		}
	}
	return b.NewRecordBatch()
}

// TestTextEmbeddings: titles are tokenized, run in length buckets padded
// to their own longest row, pooled over the mask and normalized; every
// vector equals the pure-Go reference on the same ids within 1e-5, in the
// source rows' order, for each pooling mode; null and empty titles are
// rejects.
func TestTextEmbeddings(t *testing.T) {
	for _, tc := range []struct {
		pooling   jobs.Pooling
		normalize jobs.Normalization
		maxLen    int
		bpe       bool
	}{{"mean", "l2", 0, false}, {"cls", "none", 16, false}, {"max", "", 24, false}, {"mean", "", 8, false}, {"mean", "l2", 32, true}} {
		t.Run(fmt.Sprintf("%s/%s/%d/bpe=%v", tc.pooling, tc.normalize, tc.maxLen, tc.bpe), func(t *testing.T) {
			tm := testgen.NewTextEmbedder(testgen.DefaultSeed)
			if tc.bpe {
				tm = testgen.NewTextEmbedderBPE(testgen.DefaultSeed)
			}
			spec, tm, tok := textSpecFor(t, tm, tc.pooling, tc.normalize, tc.maxLen)
			m := loadModel(t, spec)
			titles := textCorpus(300)
			titles[17], titles[250] = "", "  \t "
			rec := titlesRecord(titles, map[int]bool{5: true})
			defer rec.Release()
			if err := m.CheckSchema(rec.Schema()); err != nil {
				t.Fatal(err)
			}
			b, out := infer(t, m, rec)
			if len(b.Rejects) != 3 || b.Rejects[0].Reason != "column title: null" || b.Rejects[1].Reason != "column title: empty text" || b.Rejects[2].Row != 250 {
				t.Fatalf("rejects %+v", b.Rejects)
			}
			ml := tc.maxLen
			if ml == 0 {
				ml = jobs.DefaultMaxLength
			}
			col := out.Column(0).(*array.List)
			vals := col.ListValues().(*array.Float32)
			var worst float64
			for k, r := range b.Rows {
				want := tm.Pool(tok.Encode(nil, titles[r], ml), tc.pooling, tc.normalize == jobs.NormalizeL2)
				lo, hi := col.ValueOffsets(k)
				if int(hi-lo) != tm.D {
					t.Fatalf("row %d: %d values, want %d", r, hi-lo, tm.D)
				}
				for j, w := range want {
					d := math.Abs(float64(vals.Value(int(lo)+j)) - w)
					worst = max(worst, d)
					if d > 1e-5 {
						t.Fatalf("row %d (%q) [%d]: %v, want %v", r, titles[r], j, vals.Value(int(lo)+j), w)
					}
				}
			}
			t.Logf("max |Δ| %.2g over %d rows", worst, len(b.Rows))
		})
	}
}

// TestTextSpecErrors: text inputs and pooling are checked at load, each
// error naming its field.
func TestTextSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s *jobs.ModelSpec)
		want string
	}{
		{"no pooling", func(s *jobs.ModelSpec) { s.Pooling = "" }, `model.outputs.last_hidden_state: output "last_hidden_state" has shape [N,?,8]; set model.pooling`},
		{"bad tokenizer", func(s *jobs.ModelSpec) {
			in := s.Inputs["input_ids"]
			in.Tokenizer = "/nonexistent/tokenizer.json"
			s.Inputs["input_ids"] = in
		}, `model.inputs.input_ids.tokenizer: open /nonexistent/tokenizer.json`},
		{"mask of a non-text input", func(s *jobs.ModelSpec) {
			s.Inputs["attention_mask"] = jobs.InputSpec{MaskOf: "attention_mask"}
		}, `model.inputs.attention_mask.mask_of: "attention_mask" is not a text input`},
		{"column input next to text", func(s *jobs.ModelSpec) {
			s.Inputs["attention_mask"] = jobs.InputSpec{Column: "mask"}
		}, `model.inputs.attention_mask: column inputs next to a text input are not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _, _ := textSpec(t, "mean", "l2", 0)
			tc.edit(&spec)
			m, err := Load(spec, "job.yaml")
			if err == nil {
				m.Close()
				t.Fatalf("Load succeeded, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n %v\nwant\n %s", err, tc.want)
			}
		})
	}
	spec, _, _ := textSpec(t, "mean", "l2", 0)
	m := loadModel(t, spec)
	info, ok := m.Text()
	if !ok || info.Kind != "WordPiece" || info.VocabSize != len(testgen.BertVocab()) || info.MaxLength != jobs.DefaultMaxLength {
		t.Fatalf("Text() = %+v, %v", info, ok)
	}
	bad := arrow.NewSchema([]arrow.Field{{Name: "title", Type: arrow.PrimitiveTypes.Int64}}, nil)
	if err := m.CheckSchema(bad); err == nil || !strings.Contains(err.Error(), `model.inputs.input_ids.text[0]: column "title" is int64, want strings`) {
		t.Fatalf("CheckSchema: %v", err)
	}
}

// TestBucketPadding: on a length-skewed batch (most titles short, a long
// tail) the length-sorted buckets hold far fewer tensor elements than one
// batch padded to its longest row, and each bucket's rows are no longer
// than the next bucket's.
func TestBucketPadding(t *testing.T) {
	_, _, tok := textSpec(t, "mean", "l2", 128)
	titles := textCorpus(1024)
	lens := make([]int, len(titles))
	for i, s := range titles {
		lens[i] = len(tok.Encode(nil, s, 128))
	}
	order := lengthOrder(lens)
	for j := 1; j < len(order); j++ {
		if lens[order[j]] < lens[order[j-1]] {
			t.Fatalf("order not by length at %d", j)
		}
	}
	bucketed, flat := paddedTokens(lens, 0, cpuBucketTokens, bucketRows)
	t.Logf("padded tokens: %d bucketed vs %d padded to the longest row (%.1fx)", bucketed, flat, float64(flat)/float64(bucketed))
	if float64(flat)/float64(bucketed) < 2 {
		t.Fatalf("bucketing saves only %d → %d tokens", flat, bucketed)
	}
}

// windowRows is the pipeline's unit for batch_size 1024 (runner.ReadRows):
// the rows Infer sorts by length at once.
const windowRows = 16384

// TestWindowSortPadding: sorting a window of 16 batches by token length
// and cutting buckets by tokens pads no more than sorting each 1024-row
// batch on its own into 64-row buckets (the scheme before), on random
// length-skewed titles; both counts are reported. Every bucket stays
// within its token budget unless it is a single row.
func TestWindowSortPadding(t *testing.T) {
	_, _, tok := textSpec(t, "mean", "l2", 128)
	r := rand.New(rand.NewPCG(3, 4))
	short := []string{"blue shoe", "Café naïve", "東京の本", "red cat 😀", "usb-c cable", "the quick brown fox", "wireless headset"}
	lens := make([]int, windowRows)
	for i := range lens {
		s := short[r.IntN(len(short))]
		if r.IntN(8) == 0 {
			s = strings.Repeat("the lazy dog jumps over the green jacket, ", 1+r.IntN(12))
		} else if r.IntN(3) == 0 {
			s += " " + short[r.IntN(len(short))] + " " + short[r.IntN(len(short))]
		}
		lens[i] = len(tok.Encode(nil, s, 128))
	}
	before, flat := paddedTokens(lens, 1024, math.MaxInt, 64)
	after, _ := paddedTokens(lens, windowRows, cpuBucketTokens, bucketRows)
	real := 0
	for _, l := range lens {
		real += l
	}
	t.Logf("padded tokens of %d titles (%d real): per-batch sort, 64-row buckets %d (+%.1f%%); window sort, token buckets %d (+%.1f%%); padded to the longest %d",
		len(lens), real, before, 100*float64(before-real)/float64(real), after, 100*float64(after-real)/float64(real), flat)
	if after > before {
		t.Fatalf("window sort pads %d tokens, more than per-batch sort's %d", after, before)
	}
	sorted := slices.Sorted(slices.Values(lens))
	lo := 0
	for _, hi := range bucketEnds(sorted, cpuBucketTokens, bucketRows) {
		if n := hi - lo; n > 1 && n*sorted[hi-1] > cpuBucketTokens || n > bucketRows || n < 1 {
			t.Fatalf("bucket [%d,%d) of longest %d: %d padded tokens", lo, hi, sorted[hi-1], n*sorted[hi-1])
		}
		lo = hi
	}
}

// TestPoolingInGraph: the pooling and l2 nodes appended to the graph give
// the session an [N,D] output equal, within 1e-5, to Go's pooling of the
// [N,T,D] output (the path before them) for every pooling × normalize, on
// the WordPiece and the BPE test models, at opset 17 (Reduce* axes as
// attributes, but ReduceSum's an input) and 18 (every axes an input).
func TestPoolingInGraph(t *testing.T) {
	for _, pooling := range []jobs.Pooling{jobs.PoolingMean, jobs.PoolingCLS, jobs.PoolingMax} {
		for _, normalize := range []jobs.Normalization{jobs.NormalizeL2, jobs.NormalizeNone} {
			for _, v := range []struct {
				bpe   bool
				opset int64
			}{{false, 17}, {true, 17}, {false, 18}} {
				t.Run(fmt.Sprintf("%s/%s/bpe=%v/opset%d", pooling, normalize, v.bpe, v.opset), func(t *testing.T) {
					tm := testgen.NewTextEmbedder(testgen.DefaultSeed)
					if v.bpe {
						tm = testgen.NewTextEmbedderBPE(testgen.DefaultSeed)
					}
					spec, _, _ := textSpecFor(t, tm, pooling, normalize, 32)
					if v.opset != testgen.DefaultOpset {
						setOpset(t, spec.Path, v.opset)
					}
					inGraph := loadModel(t, spec)
					if !inGraph.outputs[0].inGraph || inGraph.goPooling != "" || inGraph.outNames[0] == "last_hidden_state" {
						t.Fatalf("pooling not in the graph: inGraph %v, why %q, session output %q", inGraph.outputs[0].inGraph, inGraph.goPooling, inGraph.outNames[0])
					}
					goPool, err := Load(spec, "job.yaml", func(o *loadOptions) { o.goPooling = true })
					if err != nil {
						t.Fatal(err)
					}
					defer goPool.Close()
					if goPool.outputs[0].inGraph {
						t.Fatal("goPooling: pooling still in the graph")
					}
					rec := titlesRecord(textCorpus(300), nil)
					defer rec.Release()
					_, got := infer(t, inGraph, rec)
					_, want := infer(t, goPool, rec)
					g := got.Column(0).(*array.List).ListValues().(*array.Float32).Float32Values()
					w := want.Column(0).(*array.List).ListValues().(*array.Float32).Float32Values()
					if len(g) != len(w) || len(g) != 300*tm.D {
						t.Fatalf("%d values in the graph, %d in Go, want %d", len(g), len(w), 300*tm.D)
					}
					var worst float64
					for i := range g {
						worst = max(worst, math.Abs(float64(g[i])-float64(w[i])))
					}
					t.Logf("max |Δ| graph vs Go pooling: %.2g", worst)
					if worst > 1e-5 {
						t.Fatalf("max |Δ| %.3g > 1e-5", worst)
					}
				})
			}
		}
	}
}

// setOpset rewrites the default-domain opset import of the model file.
func setOpset(t *testing.T, path string, version int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n < 0 || m < 0 {
			t.Fatalf("%s: bad protobuf", path)
		}
		if num == fModelOpset {
			op := appendVarint(nil, fOpsetVersion, uint64(version))
			out = appendMsg(out, fModelOpset, op)
		} else {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	if got, _, err := modelOpsetAndGraph(out); err != nil || got != version {
		t.Fatalf("opset %d, %v; want %d", got, err, version)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
