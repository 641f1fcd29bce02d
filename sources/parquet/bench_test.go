package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/sources"
)

const (
	benchRows     = 1_000_000
	benchCols     = 16
	benchRowGroup = 250_000
)

// benchFile writes (once per benchmark run) 1M rows × 16 random float32
// columns, snappy, 250k-row row groups: the shape of the project benchmark.
func benchFile(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.parquet")
	fields := make([]arrow.Field, benchCols)
	for i := range fields {
		fields[i] = arrow.Field{Name: fmt.Sprintf("f%d", i), Type: arrow.PrimitiveTypes.Float32}
	}
	sc := arrow.NewSchema(fields, nil)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	props := pq.NewWriterProperties(pq.WithCompression(compress.Codecs.Snappy), pq.WithMaxRowGroupLength(benchRowGroup), pq.WithDictionaryDefault(false))
	fw, err := pqarrow.NewFileWriter(sc, f, props, pqarrow.DefaultWriterProps())
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const chunk = 50_000
	vals := make([]float32, chunk)
	for done := 0; done < benchRows; done += chunk {
		cols := make([]arrow.Array, benchCols)
		for c := range cols {
			for i := range vals {
				vals[i] = rng.Float32()
			}
			bld := array.NewFloat32Builder(memory.DefaultAllocator)
			bld.AppendValues(vals, nil)
			cols[c] = bld.NewArray()
			bld.Release()
		}
		rec := array.NewRecordBatch(sc, cols, chunk)
		if err := fw.WriteBuffered(rec); err != nil {
			b.Fatal(err)
		}
		rec.Release()
		for _, c := range cols {
			c.Release()
		}
	}
	if err := fw.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkScan reads 1M rows × 16 float32 columns through Plan and Open,
// as the runner does, and reports rows/s. "raw" is pqarrow reading the whole
// file directly, the floor this source adds overhead to.
func BenchmarkScan(b *testing.B) {
	path := benchFile(b)
	s := mustNew(b, path)
	ctx := context.Background()
	for _, bs := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("source/batch=%d", bs), func(b *testing.B) {
			plans := mustPlan(b, s, benchRowGroup)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				var rows int64
				for _, p := range plans {
					r, err := s.Open(ctx, p.Plan, sources.ReadOptions{BatchSize: bs})
					if err != nil {
						b.Fatal(err)
					}
					for {
						rec, err := r.Next(ctx)
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
						rows += rec.NumRows()
						rec.Release()
					}
					r.Close()
				}
				if rows != benchRows {
					b.Fatalf("read %d rows", rows)
				}
			}
			reportRates(b, cpu0)
		})
	}
	b.Run("raw", func(b *testing.B) {
		cpu0 := cpuTime()
		for range b.N {
			of, err := openFile(path)
			if err != nil {
				b.Fatal(err)
			}
			fr, err := pqarrow.NewFileReader(of.rdr, pqarrow.ArrowReadProperties{BatchSize: 64 * 1024}, memory.DefaultAllocator)
			if err != nil {
				b.Fatal(err)
			}
			rr, err := fr.GetRecordReader(ctx, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			var rows int64
			for rr.Next() {
				rows += rr.RecordBatch().NumRows()
			}
			if rows != benchRows {
				b.Fatalf("read %d rows", rows)
			}
			rr.Release()
			of.Close()
		}
		reportRates(b, cpu0)
	})
}

// cpuTime is the process's user+system CPU time. On a shared machine the
// CPU-time rate is a steadier comparison than wall-clock rows/s.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportRates(b *testing.B, cpu0 time.Duration) {
	rows := float64(benchRows) * float64(b.N)
	b.ReportMetric(rows/b.Elapsed().Seconds(), "rows/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(rows/cpu.Seconds(), "rows/cpu-s")
	}
}
