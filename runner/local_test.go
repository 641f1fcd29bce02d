package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	pqsink "github.com/precog-ml/precog/sinks/parquet"
)

// fixture writes the ranker model and a dataset of files × rows int-keyed rows.
func fixture(t *testing.T, d testgen.Dataset) (dir string, spec *jobs.Spec) {
	t.Helper()
	dir = t.TempDir()
	if _, err := testgen.Write(filepath.Join(dir, "models"), "ranker"); err != nil {
		t.Fatal(err)
	}
	if _, err := testgen.WriteDataset(filepath.Join(dir, "data"), d); err != nil {
		t.Fatal(err)
	}
	cols := make([]string, 16)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
	}
	body := fmt.Sprintf(`name: scores
source:
  parquet: { path: data }
  key: user_id
  rows_per_shard: 500
model:
  path: models/ranker.onnx
  inputs: { features: { columns: [%s] } }
  outputs: { score: score }
  batch_size: 128
sinks:
  parquet: { path: out }
retry: { max_attempts: 2 }
`, strings.Join(cols, ", "))
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dir, spec
}

// faultSink wraps a real sink and fails or interrupts chosen shard attempts:
// fault injection around the real Parquet sink, not a mock.
type faultSink struct {
	sinks.Sink
	mu       sync.Mutex
	attempts map[int]int
	// failWrite says whether attempt n (1-based) of shard i fails mid-write.
	failWrite func(shard, attempt int) bool
	// onCommit runs before shard i commits.
	onCommit func(shard int)
	// afterCommit runs once shard i committed.
	afterCommit func(shard int)
	// onStage runs before each Stage (1-based call number); an error it
	// returns is Stage's.
	onStage func(call int, run sinks.RunInfo) error
	stages  int
	// writeErr is the injected write error (default: an unclassified one).
	writeErr error
}

func (f *faultSink) Stage(ctx context.Context, run sinks.RunInfo, committed []sinks.CommittedShard) error {
	f.mu.Lock()
	f.stages++
	n := f.stages
	f.mu.Unlock()
	if f.onStage != nil {
		if err := f.onStage(n, run); err != nil {
			return err
		}
	}
	return f.Sink.Stage(ctx, run, committed)
}

func (f *faultSink) Shard(ctx context.Context, run sinks.RunInfo, index int) (sinks.ShardWriter, error) {
	w, err := f.Sink.Shard(ctx, run, index)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.attempts == nil {
		f.attempts = map[int]int{}
	}
	f.attempts[index]++
	n := f.attempts[index]
	f.mu.Unlock()
	return &faultWriter{ShardWriter: w, f: f, shard: index, attempt: n}, nil
}

type faultWriter struct {
	sinks.ShardWriter
	f              *faultSink
	shard, attempt int
	writes         int
}

func (w *faultWriter) Write(ctx context.Context, b arrow.RecordBatch) error {
	w.writes++
	if w.writes == 2 && w.f.failWrite != nil && w.f.failWrite(w.shard, w.attempt) {
		if w.f.writeErr != nil {
			return w.f.writeErr
		}
		return errors.New("injected write failure")
	}
	return w.ShardWriter.Write(ctx, b)
}

func (w *faultWriter) Commit(ctx context.Context) error {
	if w.f.onCommit != nil {
		w.f.onCommit(w.shard)
	}
	if err := w.ShardWriter.Commit(ctx); err != nil {
		return err
	}
	if w.f.afterCommit != nil {
		w.f.afterCommit(w.shard)
	}
	return nil
}

func parquetSink(t *testing.T, spec *jobs.Spec) sinks.Sink {
	t.Helper()
	s, err := pqsink.New(spec.Name, *spec.Sinks.Parquet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// published reads the published Parquet output and returns its distinct
// keys, failing the test on a duplicate.
func published(t *testing.T, dir string) map[int64]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no published files in %s (%v)", dir, err)
	}
	keys := map[int64]bool{}
	for _, f := range files {
		rdr, err := file.OpenParquetFile(f, false)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		col := tbl.Column(tbl.Schema().FieldIndices("user_id")[0]).Data()
		for _, chunk := range col.Chunks() {
			for _, k := range chunk.(*array.Int64).Int64Values() {
				if keys[k] {
					t.Errorf("key %d published twice", k)
				}
				keys[k] = true
			}
		}
		tbl.Release()
		rdr.Close()
	}
	return keys
}

var dataset = testgen.Dataset{Seed: 11, FilesPerDate: 2, RowsPerFile: 1500, RowsPerGroup: 500}

func TestRetriedShardLeavesNoDuplicates(t *testing.T) {
	dir, spec := fixture(t, dataset)
	fs := &faultSink{Sink: parquetSink(t, spec), failWrite: func(shard, attempt int) bool { return shard == 2 && attempt == 1 }}
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Sinks: []sinks.Sink{fs}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Run.Counts.RowsOut != 3000 || res.Run.Counts.RowsIn != 3000 {
		t.Fatalf("counts %+v, want 3000 in and out", res.Run.Counts)
	}
	if fs.attempts[2] != 2 {
		t.Errorf("shard 2 attempts: %d, want 2", fs.attempts[2])
	}
	rows := published(t, spec.Sinks.Parquet.Path)
	if len(rows) != 3000 {
		t.Fatalf("published %d distinct keys, want 3000", len(rows))
	}
}

// TestInterruptAfterCommitKeepsTheShard: Ctrl-C that lands after a
// shard's sinks committed, before its attempt returned, still records the
// shard: the resume skips it instead of computing it again.
func TestInterruptAfterCommitKeepsTheShard(t *testing.T) {
	dir, spec := fixture(t, dataset)
	ctx, cancel := context.WithCancel(context.Background())
	fs := &faultSink{Sink: parquetSink(t, spec), afterCommit: func(shard int) {
		if shard == 0 {
			cancel()
		}
	}}
	state := filepath.Join(dir, "state")
	if _, err := RunLocal(ctx, spec, LocalOptions{StateDir: state, Sinks: []sinks.Sink{fs}}); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: state, Sinks: []sinks.Sink{&faultSink{Sink: parquetSink(t, spec)}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumed || res.SkippedShards < 1 {
		t.Errorf("resumed %v, skipped %d shards; want shard 0, committed before the interrupt, skipped", res.Resumed, res.SkippedShards)
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys, want 3000", len(rows))
	}
}

func TestInterruptedRunResumes(t *testing.T) {
	dir, spec := fixture(t, dataset)
	ctx, cancel := context.WithCancel(context.Background())
	var commits atomic.Int32
	fs := &faultSink{Sink: parquetSink(t, spec), onCommit: func(int) {
		if commits.Add(1) == 3 {
			cancel() // Ctrl-C while the third shard commits
		}
	}}
	state := filepath.Join(dir, "state")
	_, err := RunLocal(ctx, spec, LocalOptions{StateDir: state, Sinks: []sinks.Sink{fs}})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	if _, err := os.Stat(filepath.Join(spec.Sinks.Parquet.Path, "_SUCCESS")); !os.IsNotExist(err) {
		t.Fatal("an interrupted run published")
	}

	fs2 := &faultSink{Sink: parquetSink(t, spec)}
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: state, Sinks: []sinks.Sink{fs2}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumed || res.SkippedShards < 2 {
		t.Errorf("resumed %v, skipped %d shards; want a resume skipping ≥ 2", res.Resumed, res.SkippedShards)
	}
	if res.RowsThisProcess >= 3000 {
		t.Errorf("the resumed run read %d rows: it recomputed committed shards", res.RowsThisProcess)
	}
	if res.Run.Counts.RowsOut != 3000 {
		t.Errorf("run counts %+v, want 3000 out", res.Run.Counts)
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys, want 3000", len(rows))
	}
}

func TestShardOutOfAttemptsIsRetriedByRerun(t *testing.T) {
	dir, spec := fixture(t, dataset)
	state := filepath.Join(dir, "state")
	broken := &faultSink{Sink: parquetSink(t, spec), failWrite: func(shard, _ int) bool { return shard == 1 }}
	_, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: state, Sinks: []sinks.Sink{broken}})
	if err == nil || !strings.Contains(err.Error(), "shard 1") || !strings.Contains(err.Error(), "rerun the same command") {
		t.Fatalf("err = %v", err)
	}
	if broken.attempts[1] != 2 {
		t.Errorf("shard 1 attempts: %d, want max_attempts 2", broken.attempts[1])
	}
	fixed := &faultSink{Sink: parquetSink(t, spec)}
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: state, Sinks: []sinks.Sink{fixed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(fixed.attempts) != 1 || fixed.attempts[1] != 1 {
		t.Errorf("rerun wrote shards %v, want only shard 1", fixed.attempts)
	}
	if res.Run.Counts.RowsOut != 3000 {
		t.Errorf("counts %+v", res.Run.Counts)
	}
}

func TestTooManyRejectsFailsEarlyAndPublishesNothing(t *testing.T) {
	d := dataset
	d.BadFraction = 0.3
	dir, spec := fixture(t, d)
	s := parquetSink(t, spec)
	fs := &faultSink{Sink: s}
	_, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Sinks: []sinks.Sink{fs}})
	if !errors.Is(err, ErrTooManyRejects) {
		t.Fatalf("err = %v, want ErrTooManyRejects", err)
	}
	if len(fs.attempts) == 6 {
		t.Errorf("all 6 shards ran: the run did not stop once rejects passed the limit")
	}
	entries, _ := os.ReadDir(filepath.Dir(spec.Sinks.Parquet.Path))
	for _, e := range entries {
		// The writer lease's directory stays, its record released.
		if (strings.HasPrefix(e.Name(), "out") || strings.HasPrefix(e.Name(), ".out")) && e.Name() != ".out.precog.lock" {
			t.Errorf("failed run left %s behind", e.Name())
		}
	}
}

func TestParallelShards(t *testing.T) {
	dir, spec := fixture(t, dataset)
	spec.Model.Sessions = 2
	fs := &faultSink{Sink: parquetSink(t, spec)}
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Parallel: 3, Sinks: []sinks.Sink{fs}})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.attempts) != 6 || res.Run.Counts.RowsOut != 3000 {
		t.Fatalf("attempts %v counts %+v", fs.attempts, res.Run.Counts)
	}
	stages := res.Stages.Snapshot()
	for _, st := range []string{StageRead, StageEncode, StageInfer, "write parquet"} {
		if stages[st] <= 0 {
			t.Errorf("stage %q has no busy time: %v", st, stages)
		}
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys", len(rows))
	}
}

// TestLostShardIsRecomputed: a shard the store lost between its commit and
// the publish (Stage reports it missing) is recomputed, then the run
// publishes whole; a store that keeps losing it fails the run and publishes
// nothing.
func TestLostShardIsRecomputed(t *testing.T) {
	dir, spec := fixture(t, dataset)
	fs := &faultSink{Sink: parquetSink(t, spec)}
	fs.onStage = func(call int, _ sinks.RunInfo) error {
		if call == 1 {
			return &sinks.MissingError{Sink: "parquet", Shards: []int{1}, Reason: "injected: file gone"}
		}
		return nil
	}
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Sinks: []sinks.Sink{fs}})
	if err != nil {
		t.Fatal(err)
	}
	if fs.attempts[1] != 2 || fs.attempts[0] != 1 {
		t.Errorf("attempts %v: want shard 1 recomputed once, the others not", fs.attempts)
	}
	if res.Run.Counts.RowsOut != 3000 {
		t.Errorf("run counts %+v after the recompute, want 3000 out (not double-counted)", res.Run.Counts)
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys, want 3000", len(rows))
	}

	dir2, spec2 := fixture(t, dataset)
	always := &faultSink{Sink: parquetSink(t, spec2), onStage: func(int, sinks.RunInfo) error {
		return &sinks.MissingError{Sink: "parquet", Shards: []int{0}, Reason: "injected: keeps losing it"}
	}}
	_, err = RunLocal(context.Background(), spec2, LocalOptions{StateDir: filepath.Join(dir2, "state"), Sinks: []sinks.Sink{always}})
	if err == nil || !strings.Contains(err.Error(), "lost committed shards") {
		t.Fatalf("err = %v, want the run to fail after repeated losses", err)
	}
	if _, err := os.Stat(spec2.Sinks.Parquet.Path); !os.IsNotExist(err) {
		t.Fatalf("a run whose store kept losing shards published: %v", err)
	}
}

// TestPermanentErrorFailsAtOnce: a full disk is not retried three times.
func TestPermanentErrorFailsAtOnce(t *testing.T) {
	dir, spec := fixture(t, dataset)
	fs := &faultSink{Sink: parquetSink(t, spec)}
	fs.failWrite = func(shard, attempt int) bool { return shard == 0 }
	fs.writeErr = &os.PathError{Op: "write", Path: "part-00000", Err: syscall.ENOSPC}
	_, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Parallel: 1, Sinks: []sinks.Sink{fs}})
	if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "permanent") {
		t.Fatalf("err = %v, want the ENOSPC cause, not retried", err)
	}
	if fs.attempts[0] != 1 {
		t.Fatalf("shard 0 was attempted %d times, want 1", fs.attempts[0])
	}
}

// TestTransientErrorRetriedWithoutSpendingAttempts: connection resets ride
// out within retry.transient_window and do not use up max_attempts.
func TestTransientErrorRetriedWithoutSpendingAttempts(t *testing.T) {
	dir, spec := fixture(t, dataset)
	fs := &faultSink{Sink: parquetSink(t, spec)}
	fs.failWrite = func(shard, attempt int) bool { return shard == 0 && attempt <= 5 }
	fs.writeErr = fmt.Errorf("write: %w", syscall.ECONNRESET)
	res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Parallel: 1, Sinks: []sinks.Sink{fs}})
	if err != nil {
		t.Fatalf("5 transient failures with max_attempts 3: %v", err)
	}
	if fs.attempts[0] != 6 || res.Run.Counts.RowsOut != 3000 {
		t.Fatalf("shard 0 attempts %d, counts %+v; want 6 attempts and every row", fs.attempts[0], res.Run.Counts)
	}
}
