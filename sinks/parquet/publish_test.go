package parquet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// writeRun prepares run, commits rows [0, n) as one shard and stages it.
func writeRun(t *testing.T, s *Sink, run sinks.RunInfo, n int) {
	t.Helper()
	writeShard0(t, s, run, n)
	if err := s.Stage(context.Background(), run, []sinks.CommittedShard{{Index: 0, Rows: int64(n)}}); err != nil {
		t.Fatalf("Stage: %v", err)
	}
}

// writeShard0 prepares run and commits rows [0, n) as shard 0.
func writeShard0(t *testing.T, s *Sink, run sinks.RunInfo, n int) {
	t.Helper()
	if err := s.Prepare(context.Background(), run); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	commitShard(t, s, run, 0, n)
}

// commitShard commits rows [0, n) of run as shard index.
func commitShard(t *testing.T, s *Sink, run sinks.RunInfo, index, n int) {
	t.Helper()
	ctx := context.Background()
	w, err := s.Shard(ctx, run, index)
	if err != nil {
		t.Fatalf("Shard: %v", err)
	}
	b := sinktest.Batch(run, 0, n)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func expectDir(t *testing.T, dir string, run sinks.RunInfo, n int) {
	t.Helper()
	snap, err := readDir(context.Background(), dir, run.Key)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	if snap.Version != run.Version || snap.Records != n || len(snap.Rows) != n {
		t.Fatalf("%s holds version %q with %d records (%d keys), want %q with %d", dir, snap.Version, snap.Records, len(snap.Rows), run.Version, n)
	}
}

// onlyTarget checks that no staging or old directory is left beside target.
func onlyTarget(t *testing.T, target string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(target))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == filepath.Base(versionsDir(target)) {
			vs, _ := os.ReadDir(versionsDir(target))
			for _, v := range vs {
				if pv, ok := publishedVersion(filepath.Join(versionsDir(target), v.Name()), testJob); !ok || pv != v.Name() {
					t.Errorf("retained %s holds version %q, not that published version", v.Name(), pv)
				}
			}
			continue
		}
		if e.Name() != filepath.Base(target) {
			t.Errorf("left behind next to %s: %s", target, e.Name())
		}
	}
}

func TestPublishWithoutExchange(t *testing.T) {
	exchangeDirs = func(a, b string) error { return errNoExchange }
	defer func() { exchangeDirs = exchange }()
	target := filepath.Join(t.TempDir(), "out", "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	for i, v := range []string{"v1", "v2"} {
		run := sinktest.NewRun(v, false, nil)
		writeRun(t, s, run, 10*(i+1))
		if err := s.Publish(context.Background(), run); err != nil {
			t.Fatalf("Publish(%s): %v", v, err)
		}
		expectDir(t, target, run, 10*(i+1))
		onlyTarget(t, target)
	}
}

// TestPublishAfterCrashPastSwap: the swap happened but the process died
// before removing the previous run; Publish again finishes.
func TestPublishAfterCrashPastSwap(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1, run2 := sinktest.NewRun("v1", false, nil), sinktest.NewRun("v2", false, nil)
	writeRun(t, s, run1, 5)
	if err := s.Publish(ctx, run1); err != nil {
		t.Fatal(err)
	}
	writeRun(t, s, run2, 7)
	crash := errors.New("killed")
	exchangeDirs = func(a, b string) error {
		if err := exchange(a, b); err != nil {
			return err
		}
		return crash
	}
	err := s.Publish(ctx, run2)
	exchangeDirs = exchange
	if !errors.Is(err, crash) {
		t.Fatalf("Publish with simulated crash = %v", err)
	}
	expectDir(t, target, run2, 7) // the swap itself is the publish
	if err := s.Publish(ctx, run2); err != nil {
		t.Fatalf("Publish after crash: %v", err)
	}
	expectDir(t, target, run2, 7)
	onlyTarget(t, target)
}

// TestPublishAfterCrashBetweenRenames: without RENAME_EXCHANGE the process
// died after moving the old run aside; Publish again finishes.
func TestPublishAfterCrashBetweenRenames(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1, run2 := sinktest.NewRun("v1", false, nil), sinktest.NewRun("v2", false, nil)
	writeRun(t, s, run1, 5)
	if err := s.Publish(ctx, run1); err != nil {
		t.Fatal(err)
	}
	writeRun(t, s, run2, 7)
	d, err := s.dirs(run2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(d.target, d.old); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run2); err != nil {
		t.Fatalf("Publish after crash: %v", err)
	}
	expectDir(t, target, run2, 7)
	onlyTarget(t, target)
}

func TestPublishWithoutStaging(t *testing.T) {
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "recs")})
	err := s.Publish(context.Background(), sinktest.NewRun("v1", false, nil))
	if err == nil || !strings.Contains(err.Error(), "staging") {
		t.Fatalf("Publish of a never-prepared run = %v, want a staging dir error", err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, spec := range []jobs.ParquetSinkSpec{
		{Path: ""},
		{Path: "out", Compression: "lz5"},
		{Path: "out/{{.date"},
	} {
		if _, err := New(testJob, spec); err == nil {
			t.Errorf("New(%+v) succeeded", spec)
		}
	}
	s := newSink(t, jobs.ParquetSinkSpec{Path: "out/date={{.date}}"})
	if _, err := s.Target(sinktest.NewRun("v1", false, nil)); err == nil || !strings.Contains(err.Error(), "date") {
		t.Errorf("Target without the date param = %v, want an error naming it", err)
	}
	if _, err := s.dirs(sinktest.NewRun("../x", false, map[string]string{"date": "d"})); err == nil {
		t.Errorf("a version with a slash was accepted")
	}
}

func TestWriteRejectsWrongSchema(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "recs")})
	run := sinktest.NewRun("v1", false, nil)
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort(ctx)
	other := sinktest.NewRun("v1", true, nil) // string keys
	b := sinktest.Batch(other, 0, 3)
	defer b.Release()
	err = w.Write(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "user_key") || !strings.Contains(err.Error(), "shard 0") {
		t.Fatalf("Write with the wrong key type = %v, want an error naming the column and shard", err)
	}
}

// TestRowGroupsBounded: row groups never exceed the row bound, and the
// byte bound cuts them earlier.
func TestRowGroupsBounded(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		rows, bytes   int64
		minRowGroups  int
		maxGroupRows  int64
		writtenRows   int
		batchRowCount int
	}{
		{"rows", 1000, DefaultRowGroupBytes, 10, 1000, 10000, 768},
		{"bytes", DefaultRowGroupRows, 32 << 10, 5, DefaultRowGroupRows, 10000, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "recs")
			s := newSink(t, jobs.ParquetSinkSpec{Path: target, Compression: "none"})
			s.RowGroupRows, s.RowGroupBytes = tc.rows, tc.bytes
			run := sinktest.NewRun("v1", false, nil)
			if err := s.Prepare(ctx, run); err != nil {
				t.Fatal(err)
			}
			w, err := s.Shard(ctx, run, 3)
			if err != nil {
				t.Fatal(err)
			}
			for lo := 0; lo < tc.writtenRows; lo += tc.batchRowCount {
				b := sinktest.Batch(run, lo, min(lo+tc.batchRowCount, tc.writtenRows))
				if err := w.Write(ctx, b); err != nil {
					t.Fatal(err)
				}
				b.Release()
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			d, _ := s.dirs(run)
			r, err := file.OpenParquetFile(filepath.Join(d.staging, "part-00003.parquet"), false)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.NumRows() != int64(tc.writtenRows) {
				t.Fatalf("file has %d rows, want %d", r.NumRows(), tc.writtenRows)
			}
			if r.NumRowGroups() < tc.minRowGroups {
				t.Fatalf("file has %d row groups, want at least %d", r.NumRowGroups(), tc.minRowGroups)
			}
			for i := range r.NumRowGroups() {
				if n := r.MetaData().RowGroup(i).NumRows(); n > tc.maxGroupRows {
					t.Fatalf("row group %d has %d rows, bound %d", i, n, tc.maxGroupRows)
				}
			}
			kv := r.MetaData().KeyValueMetadata()
			if v := kv.FindValue("precog.version"); v == nil || *v != "v1" {
				t.Fatalf("precog.version metadata = %v, want v1", v)
			}
		})
	}
}

// benchShapes are the two output shapes of the benchmark table.
func benchRun(shape string) sinks.RunInfo {
	key := arrow.Field{Name: "user_id", Type: arrow.PrimitiveTypes.Int64}
	meta := []arrow.Field{
		{Name: sinks.ColModelVersion, Type: arrow.BinaryTypes.String},
		{Name: sinks.ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}
	var out []arrow.Field
	if shape == "recs" {
		out = []arrow.Field{
			{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
			{Name: "scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		}
	} else {
		out = []arrow.Field{{Name: "score", Type: arrow.PrimitiveTypes.Float32}}
	}
	fields := append(append([]arrow.Field{key}, out...), meta...)
	return sinks.RunInfo{Job: shape, RunID: "bench", Version: "bench", Schema: arrow.NewSchema(fields, nil), Key: "user_id"}
}

func benchBatch(run sinks.RunInfo, rows int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, run.Schema)
	defer b.Release()
	for i := range rows {
		for c, f := range run.Schema.Fields() {
			switch f.Name {
			case "user_id":
				b.Field(c).(*array.Int64Builder).Append(int64(i) * 7919)
			case "items":
				lb := b.Field(c).(*array.ListBuilder)
				lb.Append(true)
				vb := lb.ValueBuilder().(*array.Int64Builder)
				for j := range 50 {
					vb.Append(int64((i*31 + j*977) % 1_000_003))
				}
			case "scores":
				lb := b.Field(c).(*array.ListBuilder)
				lb.Append(true)
				vb := lb.ValueBuilder().(*array.Float32Builder)
				for j := range 50 {
					vb.Append(1 / float32(j+1+i%7))
				}
			case "score":
				b.Field(c).(*array.Float32Builder).Append(float32(i%1000) / 1000)
			case sinks.ColModelVersion:
				b.Field(c).(*array.StringBuilder).Append("abcdef012345")
			case sinks.ColComputedAt:
				b.Field(c).(*array.TimestampBuilder).Append(arrow.Timestamp(1730462400000000 + int64(i)))
			}
		}
	}
	return b.NewRecordBatch()
}

// BenchmarkWrite measures one shard writer's rows/s: batches of 1024 rows
// written and committed (fsync included) for the recs shape (int64 key,
// list<int64>[50], list<float32>[50]) and the ranker shape (one float32).
func BenchmarkWrite(b *testing.B) {
	for _, shape := range []string{"recs", "ranker"} {
		for _, comp := range []string{"zstd", "snappy"} {
			b.Run(shape+"/"+comp, func(b *testing.B) {
				ctx := context.Background()
				run := benchRun(shape)
				s, err := New(testJob, jobs.ParquetSinkSpec{Path: filepath.Join(b.TempDir(), "out"), Compression: comp})
				if err != nil {
					b.Fatal(err)
				}
				batch := benchBatch(run, 1024)
				defer batch.Release()
				const perShard = 256 // batches: 262144 rows per shard
				b.ResetTimer()
				rows := 0
				for i := 0; i < b.N; {
					w, err := s.Shard(ctx, run, i)
					if err != nil {
						b.Fatal(err)
					}
					for j := 0; j < perShard && i < b.N; j, i = j+1, i+1 {
						if err := w.Write(ctx, batch); err != nil {
							b.Fatal(err)
						}
						rows += 1024
					}
					if err := w.Commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}
