package model

import (
	"context"
	"syscall"
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

// BenchmarkEncodeUnit is Encode at the pipeline's unit (runner.ReadRows:
// 16384 rows of 16 float32 features), where the tensor (1 MiB) outgrows
// the caches that a 1024-row batch fits in; cpu-us/op is this process's
// CPU per unit.
func BenchmarkEncodeUnit(b *testing.B) {
	const n = 16384
	m := loadModel(b, specFor(b, "ranker"))
	rec := columnsRecord(features(n, 16, false, 1), n, 16, arrow.PrimitiveTypes.Float32, nil)
	defer rec.Release()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for b.Loop() {
		bt, err := m.Encode(rec)
		if err != nil {
			b.Fatal(err)
		}
		bt.Release()
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N)/1e3, "cpu-us/op")
}
