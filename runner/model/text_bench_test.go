package model

import (
	"path/filepath"
	"testing"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

// BenchmarkTextBucketing is Encode (tokenization) + Infer of 1024
// length-skewed titles (most short, every 9th long) on a 384-wide
// embedding model, max_length 128: length buckets padded to their own
// longest row against every bucket padded to max_length.
func BenchmarkTextBucketing(b *testing.B) {
	tm := testgen.NewTextEmbedderSized(testgen.DefaultSeed, 384, 384)
	dir := b.TempDir()
	path, err := tm.Write(dir)
	if err != nil {
		b.Fatal(err)
	}
	spec := jobs.ModelSpec{
		Path: path,
		Inputs: map[string]jobs.InputSpec{
			"input_ids":      {Text: jobs.TextColumns{"title"}, Tokenizer: filepath.Join(dir, "tokenizer.json"), MaxLength: 128},
			"attention_mask": {MaskOf: "input_ids"},
		},
		Outputs: map[string]string{"last_hidden_state": "embedding"}, Pooling: "mean", Normalize: "l2",
	}
	rec := titlesRecord(textCorpus(benchRows), nil)
	defer rec.Release()
	for _, tc := range []struct {
		name  string
		padTo int
	}{{"bucketed", 0}, {"padded_to_max_length", 128}} {
		b.Run(tc.name, func(b *testing.B) {
			m := loadModel(b, spec)
			m.padTo = tc.padTo
			for b.Loop() {
				bt, err := m.Encode(rec)
				if err != nil {
					b.Fatal(err)
				}
				out, err := m.Infer(b.Context(), bt)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
				bt.Release()
			}
			b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
