package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sources"
)

const (
	benchRows = 1_000_000
	benchCols = 16
)

var (
	benchOnce sync.Once
	benchPG   *testservers.PG
)

// benchTable creates (once per test binary) a table of 1M rows: id int8 and
// 16 random float4 columns, the shape of the project benchmark.
func benchTable(b *testing.B) *testservers.PG {
	b.Helper()
	benchOnce.Do(func() {
		// The database outlives this benchmark so that the others reuse it;
		// the test binary's server is removed at exit.
		benchPG = testservers.Postgres(&keepTB{TB: b})
		cols := make([]string, benchCols)
		vals := make([]string, benchCols)
		for i := range cols {
			cols[i] = fmt.Sprintf("f%d real", i)
			vals[i] = "random()"
		}
		benchPG.Exec(b, "CREATE TABLE bench (id int8 PRIMARY KEY, "+strings.Join(cols, ", ")+")")
		benchPG.Exec(b, fmt.Sprintf("INSERT INTO bench SELECT i, %s FROM generate_series(0, %d) i", strings.Join(vals, ", "), benchRows-1))
		benchPG.Exec(b, "VACUUM ANALYZE bench")
	})
	if benchPG == nil {
		b.Fatal("bench table setup failed")
	}
	return benchPG
}

// cpuTime is this process's user+system CPU time. Benchmarks report the
// client's CPU per row next to rows/s: on a shared machine the wall-clock
// rate mostly measures the server's share of the cores, the CPU cost is what
// the source itself adds.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds rows/s and client CPU ns/row for b.N passes over benchRows.
func report(b *testing.B, cpu0 time.Duration) {
	rows := float64(benchRows) * float64(b.N)
	b.ReportMetric(rows/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/rows, "cpu-ns/row")
}

// keepTB drops cleanups so the bench database survives the first benchmark.
type keepTB struct{ testing.TB }

func (keepTB) Cleanup(func()) {}

// BenchmarkScan streams 1M rows × 16 float4 columns (plus the int8 id) as
// one shard into Arrow batches of 1024 rows: the source's rows/s.
func BenchmarkScan(b *testing.B) {
	pg := benchTable(b)
	s := newSource(b, pg, "SELECT * FROM bench", "id")
	plans := plan(b, s, benchRows)
	if len(plans) != 1 {
		b.Fatalf("%d shards", len(plans))
	}
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		r, err := s.Open(ctx, plans[0].Plan, sources.ReadOptions{BatchSize: 1024})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			rec, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += int(rec.NumRows())
			rec.Release()
		}
		r.Close()
		if n != benchRows {
			b.Fatalf("read %d rows", n)
		}
	}
	report(b, cpu0)
}

// BenchmarkScanShards reads the same rows as 4 range shards of 250k rows
// concurrently, as 4 workers would.
func BenchmarkScanShards(b *testing.B) {
	pg := benchTable(b)
	s := newSource(b, pg, "SELECT * FROM bench", "id")
	plans := plan(b, s, benchRows/4)
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make([]error, len(plans))
		for i, sp := range plans {
			wg.Go(func() {
				r, err := s.Open(ctx, sp.Plan, sources.ReadOptions{BatchSize: 1024})
				if err != nil {
					errs[i] = err
					return
				}
				defer r.Close()
				for {
					rec, err := r.Next(ctx)
					if errors.Is(err, io.EOF) {
						return
					}
					if err != nil {
						errs[i] = err
						return
					}
					rec.Release()
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	report(b, cpu0)
}

// BenchmarkScanRawPgx is the raw limit: the same query through pgx rows with
// binary results, touching every value's bytes but building nothing.
func BenchmarkScanRawPgx(b *testing.B) {
	pg := benchTable(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	cpu0 := cpuTime()
	for b.Loop() {
		rows, err := conn.Query(ctx, "SELECT * FROM (\nSELECT * FROM bench\n) q WHERE q.id >= $1 AND q.id < $2", int64(0), int64(benchRows))
		if err != nil {
			b.Fatal(err)
		}
		n, sum := 0, 0
		for rows.Next() {
			for _, v := range rows.RawValues() {
				sum += len(v)
			}
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if n != benchRows || sum == 0 {
			b.Fatalf("read %d rows", n)
		}
	}
	report(b, cpu0)
}
