package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// testJob is the job name sinktest.NewRun gives its runs.
const testJob = "sinktest"

func newSink(t *testing.T, spec jobs.ParquetSinkSpec) *Sink {
	t.Helper()
	s, err := New(testJob, spec)
	if err != nil {
		t.Fatalf("New(%+v): %v", spec, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, comp := range []string{"", "snappy"} {
		t.Run("compression="+comp, func(t *testing.T) {
			sinktest.Exercise(t, sinktest.Harness{
				New: func(t *testing.T) sinks.Sink {
					return newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "out", "date={{.date}}"), Compression: comp})
				},
				Read: func(ctx context.Context, s sinks.Sink, run sinks.RunInfo) (sinktest.Snapshot, error) {
					dir, err := s.(*Sink).Target(run)
					if err != nil {
						return sinktest.Snapshot{}, err
					}
					return readDir(ctx, dir, run.Key)
				},
				LoseShard: func(ctx context.Context, s sinks.Sink, run sinks.RunInfo, index int) error {
					d, err := s.(*Sink).dirs(run)
					if err != nil {
						return err
					}
					return os.Remove(filepath.Join(d.staging, partName(index)))
				},
			})
		})
	}
}

// readDir reads a published directory as a reader does: through one handle
// on the directory, so a concurrent swap cannot mix two runs; a run removed
// while being read is read again.
func readDir(ctx context.Context, dir, key string) (sinktest.Snapshot, error) {
	for attempt := 0; ; attempt++ {
		snap, err := readDirOnce(dir, key)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 20 {
			return snap, err
		}
		if err := ctx.Err(); err != nil {
			return snap, err
		}
	}
}

func readDirOnce(dir, key string) (sinktest.Snapshot, error) {
	snap := sinktest.Snapshot{Rows: map[string]sinktest.Row{}}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return snap, nil // nothing published
	}
	if err != nil {
		return snap, err
	}
	defer root.Close()
	b, err := root.ReadFile(SuccessFile)
	if err != nil {
		return snap, fmt.Errorf("%s: %w", dir, err)
	}
	var succ Success
	if err := json.Unmarshal(b, &succ); err != nil {
		return snap, fmt.Errorf("%s/_SUCCESS: %w", dir, err)
	}
	snap.Version = succ.Version
	d, err := root.Open(".")
	if err != nil {
		return snap, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return snap, err
	}
	sort.Strings(names)
	for _, n := range names {
		if n == SuccessFile || n == MarkerFile {
			continue
		}
		if !strings.HasPrefix(n, "part-") || !strings.HasSuffix(n, ".parquet") {
			return snap, fmt.Errorf("%s: unexpected file %s in a published directory", dir, n)
		}
		f, err := root.Open(n)
		if err != nil {
			return snap, err
		}
		cnt, err := readFile(f, key, snap.Rows)
		f.Close()
		if err != nil {
			return snap, fmt.Errorf("%s/%s: %w", dir, n, err)
		}
		snap.Records += cnt
	}
	return snap, nil
}

func readFile(f *os.File, key string, rows map[string]sinktest.Row) (int, error) {
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return 0, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		return 0, err
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return 0, err
	}
	defer rr.Release()
	n := 0
	for rr.Next() {
		c, err := sinktest.RowsFromRecord(rr.RecordBatch(), key, rows)
		if err != nil {
			return n, err
		}
		n += c
	}
	if err := rr.Err(); err != nil {
		return n, err
	}
	return n, nil
}
