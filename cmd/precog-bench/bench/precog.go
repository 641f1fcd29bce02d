package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/sources"
	pqsource "github.com/precog-ml/precog/sources/parquet"
)

// Dataset shape of every core run: files of rowsPerFile rows, one shard per
// file, so a shard count is a row count and the resume test can kill at a
// shard boundary.
const (
	rowsPerFile = 100_000
	dim         = 16
	batchSize   = 1024
)

// genData writes a dataset of rows rows (16 float32 feature columns f0…f15
// and an int64 user_id) under dir and returns the directory.
func genData(dir string, rows int64) (string, error) {
	files := int((rows + rowsPerFile - 1) / rowsPerFile)
	t0 := time.Now()
	res, err := testgen.WriteDataset(dir, testgen.Dataset{
		Dim: dim, Layout: testgen.LayoutColumns, Writer: testgen.WriterArrow, Codec: testgen.CodecSnappy,
		FilesPerDate: files, RowsPerFile: rows / int64(files), RowsPerGroup: 50_000,
	})
	if err != nil {
		return "", fmt.Errorf("dataset %s (%d rows): %w", dir, rows, err)
	}
	slog.Info("dataset written", "dir", dir, "rows", res.Rows, "files", len(res.Files), "MiB", res.Bytes>>20, "took", time.Since(t0).Round(time.Millisecond))
	return dir, nil
}

// featureColumns is f0…f15.
func featureColumns() []string {
	cols := make([]string, dim)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
	}
	return cols
}

// writeSpec writes a job spec that runs modelName over data into sinksYAML
// (the lines under `sinks:`, indented two spaces) and returns its path.
// Its shards are the dataset's files (rowsPerFile rows each).
func (h *harness) writeSpec(name, modelName, data string, outputs map[string]string, sinksYAML string) (string, error) {
	return h.writeSpecWith(name, modelName, data, outputs, sinksYAML, specOptions{})
}

// specOptions are the spec fields a measurement may change from writeSpec's.
type specOptions struct {
	// RowsPerShard is source.rows_per_shard (0: rowsPerFile).
	RowsPerShard int64
	// Threads is model.threads (0: the runtime's default).
	Threads int
	// Extra is top-level YAML appended to the spec (e.g. a checks: block).
	Extra string
}

// writeSpecWith is writeSpec with the fields of o.
func (h *harness) writeSpecWith(name, modelName, data string, outputs map[string]string, sinksYAML string, o specOptions) (string, error) {
	if o.RowsPerShard == 0 {
		o.RowsPerShard = rowsPerFile
	}
	threads := ""
	if o.Threads > 0 {
		threads = fmt.Sprintf("  threads: %d\n", o.Threads)
	}
	var outs strings.Builder
	for k, v := range outputs {
		fmt.Fprintf(&outs, "    %s: %s\n", k, v)
	}
	y := fmt.Sprintf(`name: %s
source:
  parquet:
    path: %q
  key: %s
  rows_per_shard: %d
model:
  path: %q
  inputs:
    features: { columns: [%s] }
  outputs:
%s  batch_size: %d
%ssinks:
%s%s`, name, data, testgen.KeyColumn, o.RowsPerShard, filepath.Join(h.models, modelName+".onnx"),
		strings.Join(featureColumns(), ", "), outs.String(), batchSize, threads, sinksYAML, o.Extra)
	p := filepath.Join(h.cfg.work, "jobs", name+".yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("spec %s: %w", p, err)
	}
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		return "", fmt.Errorf("spec %s: %w", p, err)
	}
	return p, nil
}

// runStats is what one `precog run` reported and cost.
type runStats struct {
	Wall       time.Duration
	SummaryRPS float64 // rows/s printed by the summary (rows this process / run duration)
	// WorkRPS is the summary's rate after start-up where it names one
	// (start-up a tenth of the run or more), else SummaryRPS.
	WorkRPS float64
	RowsIn  int64
	RowsOut int64
	Skipped int // shards already committed by an earlier attempt
	Shards  int
	MaxRSS  int64 // bytes
	// CPU is the command's user+system CPU time.
	CPU    time.Duration
	Killed bool
	// Stages is the summary's stage busy-time line ("infer 1.2s, write
	// parquet 0.3s, …"), busiest first: the busiest stage bounds the run.
	Stages string
	// Log is the command's stderr (its slog lines).
	Log string
}

var (
	reRate    = regexp.MustCompile(`\((\d+) rows/s[;)]`)
	reWork    = regexp.MustCompile(`; (\d+) rows/s after `)
	reRows    = regexp.MustCompile(`rows:\s+(\d+) in, (\d+) out`)
	reResumed = regexp.MustCompile(`resumed:\s+(\d+) of (\d+) shards`)
	reStages  = regexp.MustCompile(`stages:\s+(.*) busy`)
)

// runPrecog runs `precog run spec` as a child process with its own state
// dir. When killWhen is set it is polled every 10 ms and the child is killed
// with SIGKILL once it returns true.
func (h *harness) runPrecog(ctx context.Context, spec, stateDir string, killWhen func() bool) (runStats, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, h.cfg.bin, "run", spec, "--no-progress", "--state-dir", stateDir)
	cmd.Stdout = &out
	cmd.Stderr = &errb
	cmd.Env = os.Environ()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return runStats{}, fmt.Errorf("start %s: %w", h.cfg.bin, err)
	}
	var st runStats
	if killWhen != nil {
		done := make(chan struct{})
		go func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if killWhen() {
						st.Killed = cmd.Process.Signal(syscall.SIGKILL) == nil
						return
					}
				}
			}
		}()
		defer close(done)
	}
	err := cmd.Wait()
	st.Wall = time.Since(t0)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		st.MaxRSS = ru.Maxrss * 1024
	}
	st.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if st.Killed {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("precog run %s: %w\n%s%s", spec, err, out.String(), tail(errb.String(), 2000))
	}
	st.Log = errb.String()
	s := out.String()
	if m := reRate.FindStringSubmatch(s); m != nil {
		st.SummaryRPS, _ = strconv.ParseFloat(m[1], 64)
	}
	st.WorkRPS = st.SummaryRPS
	if m := reWork.FindStringSubmatch(s); m != nil {
		st.WorkRPS, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reRows.FindStringSubmatch(s); m != nil {
		st.RowsIn, _ = strconv.ParseInt(m[1], 10, 64)
		st.RowsOut, _ = strconv.ParseInt(m[2], 10, 64)
	}
	if m := reResumed.FindStringSubmatch(s); m != nil {
		st.Skipped, _ = strconv.Atoi(m[1])
		st.Shards, _ = strconv.Atoi(m[2])
	}
	if m := reStages.FindStringSubmatch(s); m != nil {
		st.Stages = m[1]
	}
	if st.SummaryRPS == 0 || st.RowsIn == 0 {
		return st, fmt.Errorf("precog run %s: no rows or rate in its summary:\n%s", spec, s)
	}
	slog.Info("precog run", "spec", filepath.Base(spec), "wall", st.Wall.Round(time.Millisecond), "rows", st.RowsIn,
		"summary_rows_per_s", st.SummaryRPS, "maxrss_MiB", st.MaxRSS>>20, "skipped_shards", st.Skipped)
	return st, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// rawScan measures rows/s of the Parquet source alone over the dataset:
// every shard in plan order, the job's projection (key and features) and
// batch size, on one goroutine, as the pipeline's read stage does.
func rawScan(ctx context.Context, data string) (float64, error) {
	src, err := pqsource.New(data)
	if err != nil {
		return 0, err
	}
	plans, err := src.Plan(ctx, rowsPerFile)
	if err != nil {
		return 0, err
	}
	cols := append([]string{testgen.KeyColumn}, featureColumns()...)
	var rows int64
	t0 := time.Now()
	for _, p := range plans {
		r, err := src.Open(ctx, p.Plan, sources.ReadOptions{Columns: cols, BatchSize: batchSize})
		if err != nil {
			return 0, err
		}
		for {
			rec, err := r.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				r.Close()
				return 0, fmt.Errorf("scan %s: %w", p.Desc, err)
			}
			rows += rec.NumRows()
			rec.Release()
		}
		if err := r.Close(); err != nil {
			return 0, err
		}
	}
	rps := float64(rows) / time.Since(t0).Seconds()
	slog.Info("raw scan", "rows", rows, "rows_per_s", int64(rps))
	return rps, nil
}
