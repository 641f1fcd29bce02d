package model

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

const benchRows = 1024

// BenchmarkEncode measures Arrow → tensor conversion alone (16 float32
// columns, no rejects): the per-batch cost precog adds before a run.
func BenchmarkEncode(b *testing.B) {
	m := loadModel(b, specFor(b, "ranker"))
	rec := columnsRecord(features(benchRows, 16, false, 1), benchRows, 16, arrow.PrimitiveTypes.Float32, nil)
	defer rec.Release()
	b.ReportAllocs()
	for b.Loop() {
		bt, err := m.Encode(rec)
		if err != nil {
			b.Fatal(err)
		}
		bt.Release()
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkPipeline is Encode + Infer per batch, against BenchmarkRaw on
// the same model, batch size and session options.
func BenchmarkPipeline(b *testing.B) {
	for _, name := range []string{"ranker", "recs", "heavy"} {
		b.Run(name, func(b *testing.B) {
			m := loadModel(b, specFor(b, name))
			k := 16
			rec := columnsRecord(features(benchRows, k, false, 1), benchRows, k, arrow.PrimitiveTypes.Float32, nil)
			defer rec.Release()
			b.ReportAllocs()
			for b.Loop() {
				bt, err := m.Encode(rec)
				if err != nil {
					b.Fatal(err)
				}
				out, err := m.Infer(context.Background(), bt)
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

func BenchmarkRaw(b *testing.B) {
	for _, name := range []string{"ranker", "recs", "heavy"} {
		b.Run(name, func(b *testing.B) {
			m := loadModel(b, specFor(b, name))
			run, done, err := m.RawRunner(benchRows)
			if err != nil {
				b.Fatal(err)
			}
			defer done()
			for b.Loop() {
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
