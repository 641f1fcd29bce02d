package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Benchmarks of the sink against its raw limit: BenchmarkSink writes
// Arrow batches through a shard writer; BenchmarkRawPipelinedSet sends the
// very same key and value bytes (pre-encoded, outside the timer) with a
// plain go-redis pipelined SET loop at the same batch, depth and TTL. The
// ratio of their rows/s is the sink's overhead.
//
//	go test ./sinks/redis -run '^$' -bench 'Sink|Raw' -benchtime 5x

const benchBatch = 1024 // rows per Arrow batch handed to Write

// benchPayload is one record shape of the benchmarks.
type benchPayload struct {
	name   string
	rows   int // rows per iteration (one shard)
	nItems int // list elements per row in items and item_scores (testRun)
	dim    int // when > 0: a vecRun record of a dim-float32 embedding instead
}

var benchPayloads = []benchPayload{
	{name: "score", rows: 200_000},              // ~120-byte records: round-trip bound
	{name: "recs50", rows: 200_000, nItems: 50}, // top-50 items and scores, ~1 KB records
	{name: "vec100", rows: 100_000, dim: 100},   // 100-float embedding, ~1.2 KB as JSON
	{name: "vec384", rows: 40_000, dim: 384},    // 384-float embedding, ~4.5 KB as JSON
}

// run is the payload's run schema.
func (p benchPayload) run(version string) sinks.RunInfo {
	if p.dim > 0 {
		return vecRun(version)
	}
	return testRun(version)
}

// batch builds rows [from, to) of the payload.
func (p benchPayload) batch(run sinks.RunInfo, from, to int) arrow.RecordBatch {
	if p.dim > 0 {
		return vecBatch(run, from, to, p.dim)
	}
	return testBatch(run, from, to, p.nItems)
}

func benchSpec(rs *testservers.RedisServer) jobs.RedisSinkSpec {
	return jobs.RedisSinkSpec{Addr: rs.Addr, DB: rs.DB, Namespace: rs.Prefix, TTL: jobs.Duration{Duration: time.Hour}}
}

// benchSinkSetup gives a sink on a fresh Redis DB and the benchmark's
// batches (released at cleanup).
func benchSinkSetup(b *testing.B, p benchPayload) (*testservers.RedisServer, *Sink, sinks.RunInfo, []arrow.RecordBatch) {
	b.Helper()
	rs := testservers.Redis(b)
	s, err := New(benchSpec(rs))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	run := p.run("bench")
	batches := make([]arrow.RecordBatch, 0, p.rows/benchBatch+1)
	for lo := 0; lo < p.rows; lo += benchBatch {
		batches = append(batches, p.batch(run, lo, min(lo+benchBatch, p.rows)))
	}
	b.Cleanup(func() {
		for _, r := range batches {
			r.Release()
		}
	})
	return rs, s, run, batches
}

// writeBenchShard writes every batch as shard 0 and commits.
func writeBenchShard(ctx context.Context, b *testing.B, s *Sink, run sinks.RunInfo, batches []arrow.RecordBatch) {
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range batches {
		if err := w.Write(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSink(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			_, s, run, batches := benchSinkSetup(b, p)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				writeBenchShard(ctx, b, s, run, batches)
			}
			b.ReportMetric(float64(b.N)*float64(p.rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func BenchmarkRawPipelinedSet(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			rs := testservers.Redis(b)
			spec := benchSpec(rs)
			cfg, err := newConfig(spec)
			if err != nil {
				b.Fatal(err)
			}
			keys, vals := encodeAll(b, p.run("bench"), rs.Prefix, p)
			client := goredis.NewClient(&goredis.Options{Addr: rs.Addr, DB: rs.DB, PoolSize: cfg.depth * 4})
			defer client.Close()
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				rawPipelinedSet(ctx, b, client, keys, vals, cfg.batch, cfg.depth, cfg.ttl)
			}
			b.ReportMetric(float64(b.N)*float64(p.rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// rawPipelinedSet is the reference loop: batches of SETs, depth pipelines
// in flight.
func rawPipelinedSet(ctx context.Context, b *testing.B, c *goredis.Client, keys []string, vals [][]byte, batch, depth int, ttl time.Duration) {
	sem := make(chan struct{}, depth)
	var wg sync.WaitGroup
	for lo := 0; lo < len(keys); lo += batch {
		hi := min(lo+batch, len(keys))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			pipe := c.Pipeline()
			for i := lo; i < hi; i++ {
				pipe.Set(ctx, keys[i], vals[i], ttl)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

// encodeAll produces the exact keys and values the sink writes for the
// benchmark rows.
func encodeAll(b *testing.B, run sinks.RunInfo, ns string, p benchPayload) ([]string, [][]byte) {
	enc, err := newRecordEncoder(run.Schema, run.Key)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 0, p.rows)
	vals := make([][]byte, 0, p.rows)
	bytes := 0
	for lo := 0; lo < p.rows; lo += benchBatch {
		rec := p.batch(run, lo, min(lo+benchBatch, p.rows))
		bb, err := enc.bind(rec)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			v, err := bb.appendRecord(nil, i)
			if err != nil {
				b.Fatal(err)
			}
			keys = append(keys, RecordKey(ns, run.Version, fmt.Sprint(lo+i)))
			vals = append(vals, v)
			bytes += len(v)
		}
		rec.Release()
	}
	b.Logf("%d records, %.0f bytes per value", len(vals), float64(bytes)/float64(len(vals)))
	return keys, vals
}

// BenchmarkSinkVsRaw alternates one sink shard and one raw loop per
// iteration, so that both see the same machine load, and reports both
// rates and their ratio (the number that matters on a shared host).
func BenchmarkSinkVsRaw(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			rs, s, run, batches := benchSinkSetup(b, p)
			ctx := context.Background()
			keys, vals := encodeAll(b, run, rs.Prefix, p)
			client := goredis.NewClient(&goredis.Options{Addr: rs.Addr, DB: rs.DB, PoolSize: s.cfg.depth * 4})
			defer client.Close()
			var sinkT, rawT, sinkCPU, rawCPU time.Duration
			b.ResetTimer()
			for b.Loop() {
				c0 := processCPU()
				t0 := time.Now()
				writeBenchShard(ctx, b, s, run, batches)
				t1 := time.Now()
				c1 := processCPU()
				rawPipelinedSet(ctx, b, client, keys, vals, s.cfg.batch, s.cfg.depth, s.cfg.ttl)
				sinkT += t1.Sub(t0)
				rawT += time.Since(t1)
				sinkCPU += c1 - c0
				rawCPU += processCPU() - c1
			}
			sinkRate := float64(b.N) * float64(p.rows) / sinkT.Seconds()
			rawRate := float64(b.N) * float64(p.rows) / rawT.Seconds()
			b.ReportMetric(sinkRate, "sink_rows/s")
			b.ReportMetric(rawRate, "raw_rows/s")
			b.ReportMetric(sinkRate/rawRate, "ratio")
			// Client CPU per row (user+sys of this process): what the sink
			// adds over the raw loop, independent of how loaded the host is.
			rows := float64(b.N) * float64(p.rows)
			b.ReportMetric(float64(sinkCPU.Nanoseconds())/rows, "sink_cpu_ns/row")
			b.ReportMetric(float64(rawCPU.Nanoseconds())/rows, "raw_cpu_ns/row")
		})
	}
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncodingMemory writes the wide payloads in each encoding and
// reports the value bytes and Redis used_memory per record (the delta of
// INFO memory over the records written, key and TTL overhead included).
//
//	go test ./sinks/redis -run '^$' -bench EncodingMemory -benchtime 1x
func BenchmarkEncodingMemory(b *testing.B) {
	for _, p := range benchPayloads[2:] {
		for _, enc := range []string{EncodingJSON, EncodingMsgpack} {
			b.Run(p.name+"/"+enc, func(b *testing.B) {
				rs := testservers.NewRedis(b) // private: used_memory is per server
				spec := benchSpec(rs)
				spec.Encoding = jobs.RedisEncoding(enc)
				s, err := New(spec)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				c := rs.Client(b)
				run := p.run("mem")
				var batches []arrow.RecordBatch
				for lo := 0; lo < p.rows; lo += benchBatch {
					batches = append(batches, p.batch(run, lo, min(lo+benchBatch, p.rows)))
				}
				defer func() {
					for _, r := range batches {
						r.Release()
					}
				}()
				var perRec, valBytes float64
				for b.Loop() {
					c.FlushDB(ctx)
					before := usedMemory(b, c)
					writeBenchShard(ctx, b, s, run, batches)
					perRec = float64(usedMemory(b, c)-before) / float64(p.rows)
					v, err := c.Get(ctx, RecordKey(rs.Prefix, run.Version, "item-7")).Bytes()
					if err != nil {
						b.Fatal(err)
					}
					valBytes = float64(len(v))
				}
				b.ReportMetric(valBytes, "value_bytes/record")
				b.ReportMetric(perRec, "used_memory_bytes/record")
				b.ReportMetric(float64(b.N)*float64(p.rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// usedMemory is the server's INFO memory used_memory.
func usedMemory(b *testing.B, c *goredis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
