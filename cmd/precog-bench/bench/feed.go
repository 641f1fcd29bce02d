package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

// feedTarget is issue 33's bar for the pipeline's own ceiling: a job whose
// model costs nothing reaches at least this fraction of a raw
// read-compute-write loop over the same files on the same cores.
const feedTarget = 0.8

// feed is issue 33's `feed` row: the null model (a ReduceSum of the 16
// features, internal/testgen) run as a job into the Parquet sink, against a
// raw arrow-go loop that reads the same files, sums the same features and
// writes key and sum as Snappy Parquet, one file per input file, one
// goroutine per core. Both touch the same bytes on the same cores, so their
// ratio is the plumbing's cost: what bounds a GPU job once the model is
// fast. DuckDB's read-sum-write is the limit; its Go module
// (duckdb-go) links DuckDB's whole native library through cgo, too heavy a
// build for a bench row, so the limit here is arrow-go's own.
func (h *harness) feed(ctx context.Context) (*section, error) {
	s := &section{Title: fmt.Sprintf("Feed: the pipeline's own ceiling (null model, %d rows, %d shards, into Parquet)",
		h.cfg.rows, h.cfg.rows/rowsPerFile)}
	data, err := h.dataset(h.cfg.rows)
	if err != nil {
		return s, err
	}
	null := testgen.NewNull()
	if err := null.WriteONNX(filepath.Join(h.models, "null.onnx")); err != nil {
		return s, err
	}
	out := filepath.Join(h.cfg.work, "out")
	spec, err := h.writeSpec("bench-null", "null", data, map[string]string{"score": "score"},
		fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(out, "null")))
	if err != nil {
		return s, err
	}
	// Alternating, best of 3 each, as the heavy row: a load spike during
	// one measurement must not decide the ratio.
	var raw, rawPerCPU, perCPU float64
	var best runStats
	var raws, runs []string
	for round := range 3 {
		rps, cpu, err := rawReadSumWrite(ctx, data, filepath.Join(out, fmt.Sprintf("raw-%d", round)), nprocs())
		if err != nil {
			return s, fmt.Errorf("raw read-sum-write: %w", err)
		}
		raws = append(raws, rate(rps, "rows/s"))
		raw = max(raw, rps)
		if cpu > 0 {
			rawPerCPU = max(rawPerCPU, float64(h.cfg.rows)/cpu.Seconds())
		}
		st, err := h.runPrecog(ctx, spec, filepath.Join(h.cfg.work, fmt.Sprintf("state-null-%d", round)), nil)
		if err != nil {
			return s, err
		}
		runs = append(runs, rate(st.SummaryRPS, "rows/s"))
		if st.CPU > 0 {
			perCPU = max(perCPU, float64(st.RowsIn)/st.CPU.Seconds())
		}
		if st.SummaryRPS > best.SummaryRPS {
			best = st
		}
		os.RemoveAll(filepath.Join(out, fmt.Sprintf("raw-%d", round)))
	}
	s.add(atLeast(fmt.Sprintf("feed: null-model job rows/s (summary, default settings) vs a raw arrow-go read-sum-write loop (%d goroutines)", nprocs()),
		best.SummaryRPS, raw, "rows/s", feedTarget))
	wallRPS := float64(best.RowsIn) / best.Wall.Seconds()
	r := atLeast("feed: the same job by the whole command's wall time ("+dur(best.Wall)+", start-up included)", wallRPS, raw, "rows/s", feedTarget)
	r.Target, r.Verdict = "report", "—"
	s.add(r)
	// CPU time does not depend on what else the machine runs: on a shared
	// machine this row says what the wall-time row would on a quiet one.
	r = atLeast("feed: rows per CPU-second (user+system, start-up included) of the same job vs the raw loop's", perCPU, rawPerCPU, "rows/CPU-s", feedTarget)
	r.Target, r.Verdict = "report", "—"
	s.add(r)
	s.note("feed: best of 3 alternating measurements each; raw loop %s; precog %s. Stage busy time of the best run: %s.",
		strings.Join(raws, ", "), strings.Join(runs, ", "), best.Stages)
	return s, nil
}

// rawReadSumWrite is the feed row's limit: workers goroutines take the
// dataset's files in turn; each reads the key and feature columns with
// pqarrow, sums the features per row and writes key and sum to a Snappy
// Parquet file of its own under out. It returns rows/s over the whole loop
// and the CPU time it took.
func rawReadSumWrite(ctx context.Context, data, out string, workers int) (float64, time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(data, "*", "*.parquet"))
	if err != nil {
		return 0, 0, err
	}
	more, _ := filepath.Glob(filepath.Join(data, "*.parquet"))
	files = append(files, more...)
	if len(files) == 0 {
		return 0, 0, fmt.Errorf("no parquet files under %s", data)
	}
	sort.Strings(files)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, 0, err
	}
	next := make(chan int, len(files))
	for i := range files {
		next <- i
	}
	close(next)
	var (
		mu   sync.Mutex
		rows int64
		errs []error
		wg   sync.WaitGroup
	)
	t0, cpu0 := time.Now(), selfCPU()
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				n, err := sumFile(ctx, files[i], filepath.Join(out, fmt.Sprintf("part-%05d.parquet", i)))
				mu.Lock()
				rows += n
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", files[i], err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	rps := float64(rows) / time.Since(t0).Seconds()
	cpu := selfCPU() - cpu0
	slog.Info("raw read-sum-write", "rows", rows, "workers", workers, "rows_per_s", int64(rps), "cpu", cpu.Round(time.Millisecond))
	return rps, cpu, nil
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sumFile reads one file's key and features, writes key and their sum.
func sumFile(ctx context.Context, in, outPath string) (int64, error) {
	pf, err := file.OpenParquetFile(in, false)
	if err != nil {
		return 0, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 * 1024}, memory.DefaultAllocator)
	if err != nil {
		return 0, err
	}
	sc, err := fr.Schema()
	if err != nil {
		return 0, err
	}
	want := append([]string{testgen.KeyColumn}, featureColumns()...)
	cols := make([]int, len(want))
	for i, name := range want {
		idx := sc.FieldIndices(name)
		if len(idx) == 0 {
			return 0, fmt.Errorf("no column %q", name)
		}
		cols[i] = idx[0]
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return 0, err
	}
	defer rr.Release()

	// The same four columns precog's Parquet sink writes, with its writer
	// properties: model_version dictionary-encoded from a one-value
	// dictionary (the constant is never hashed per row), computed_at a
	// constant built once and sliced.
	outSchema := arrow.NewSchema(append([]arrow.Field{
		{Name: testgen.KeyColumn, Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
	}, jobs.OutputTail()...), nil)
	consts := newRawConsts(outSchema, 64*1024)
	defer consts.release()
	f, err := os.Create(outPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(outSchema, f,
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false),
			parquet.WithDictionaryFor(jobs.ColModelVersion, true), parquet.WithMaxRowGroupLength(128*1024)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return 0, err
	}
	var rows int64
	for {
		rec, err := rr.Read()
		if errors.Is(err, io.EOF) || (err == nil && rec == nil) {
			break
		}
		if err != nil {
			w.Close()
			return rows, err
		}
		n := int(rec.NumRows())
		sum := make([]float32, n)
		for c := 1; c < int(rec.NumCols()); c++ {
			for r, v := range rec.Column(c).(*array.Float32).Float32Values() {
				sum[r] += v
			}
		}
		key := rec.Column(0)
		key.Retain()
		score := array.NewData(arrow.PrimitiveTypes.Float32, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Float32Traits.CastToBytes(sum))}, nil, 0, 0)
		scoreArr := array.MakeFromData(score)
		score.Release()
		mv, at := consts.slice(n)
		mvDense := consts.dense(n)
		outRec := array.NewRecordBatch(outSchema, []arrow.Array{key, scoreArr, mvDense, at}, int64(n))
		err = w.WriteBuffered(withColumns{RecordBatch: outRec, cols: []arrow.Array{key, scoreArr, mv, at}})
		outRec.Release()
		key.Release()
		scoreArr.Release()
		mv.Release()
		mvDense.Release()
		at.Release()
		if err != nil {
			w.Close()
			return rows, err
		}
		rows += int64(n)
	}
	if err := w.Close(); err != nil {
		return rows, err
	}
	return rows, nil
}

// rawConsts are the raw loop's run-constant columns (model_version and
// computed_at), built once at the read batch size and sliced per batch.
type rawConsts struct {
	mv arrow.Array // a dictionary array: all-zero indices into one value
	at arrow.Array
	// strs is model_version as strings: the record's String column, which
	// the writer is handed as mv (withColumns), as precog's sink does.
	strs arrow.Array
}

func newRawConsts(schema *arrow.Schema, size int) rawConsts {
	mem := memory.DefaultAllocator
	dict := array.NewStringBuilder(mem)
	dict.Append("0123456789ab") // a 12-character model version, as precog's
	values := dict.NewArray()
	dict.Release()
	idx := array.NewInt32Data(array.NewData(arrow.PrimitiveTypes.Int32, size,
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(make([]int32, size)))}, nil, 0, 0))
	mv := array.NewDictionaryArray(&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, idx, values)
	idx.Release()
	values.Release()
	tb := array.NewTimestampBuilder(mem, schema.Field(schema.FieldIndices(jobs.ColComputedAt)[0]).Type.(*arrow.TimestampType))
	tb.Reserve(size)
	now := arrow.Timestamp(time.Now().UnixMicro())
	for range size {
		tb.UnsafeAppend(now)
	}
	at := tb.NewArray()
	tb.Release()
	sb := array.NewStringBuilder(mem)
	for range size {
		sb.Append("0123456789ab")
	}
	strs := sb.NewArray()
	sb.Release()
	return rawConsts{mv: mv, at: at, strs: strs}
}

// dense returns model_version's strings at length n; the caller releases it.
func (c rawConsts) dense(n int) arrow.Array { return array.NewSlice(c.strs, 0, int64(n)) }

// withColumns reports its record's schema but hands the Parquet writer other
// arrays: a dictionary array for a String field (pqarrow requires the
// record's schema to equal the file's).
type withColumns struct {
	arrow.RecordBatch
	cols []arrow.Array
}

func (r withColumns) Columns() []arrow.Array   { return r.cols }
func (r withColumns) Column(i int) arrow.Array { return r.cols[i] }

// slice returns both columns at length n (at most the size they were built
// at); the caller releases them.
func (c rawConsts) slice(n int) (arrow.Array, arrow.Array) {
	return array.NewSlice(c.mv, 0, int64(n)), array.NewSlice(c.at, 0, int64(n))
}

func (c rawConsts) release() {
	c.mv.Release()
	c.at.Release()
	c.strs.Release()
}
