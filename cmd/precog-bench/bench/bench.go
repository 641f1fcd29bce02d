// Package bench is precog's end-to-end benchmark harness (`make bench`,
// cmd/precog-bench; the GPU check build of precog runs it as `precog
// gpu-check`, so that one binary ships to a GPU machine).
//
// Every number it reports is a ratio against the raw limit measured in the
// same run on the same machine (raw ONNX Runtime on prebuilt tensors, a raw
// Parquet scan, a raw go-redis pipelined SET loop, raw pgx CopyFrom, raw
// go-redis GETs, single-statement Postgres round trips, a raw
// LISTEN/NOTIFY), because the machines it runs on are shared and noisy:
// absolute rows/s move by tens of percent between runs, ratios much less.
//
//	go run ./cmd/precog-bench -out .cache/bench-results.md -readme docs/benchmarks.md
//
// It generates its datasets on the fly under -work (removed afterwards),
// starts its own redis-server and postgres (internal/testservers), runs
// bin/precog as a child process (so that wall time and peak RSS are the
// command's own) and, for the lookup API, drives the server from a separate
// load generator process (cmd/precog-bench/loadgen).
package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/runner/model"
)

// config is the harness's command line.
type config struct {
	out    string
	readme string
	work   string
	bin    string
	rows   int64
	// feedRows is the rows of the feed section's null-model job (issue
	// 33 measured DuckDB on 2M).
	feedRows int64
	// duckdb is `make duckdb`'s directory (empty: $PRECOG_DUCKDB_DIR, else
	// .cache/duckdb-<version>).
	duckdb   string
	heavyRow int64
	recsRows int64
	bigRows  int64
	big      bool
	sinkRows int64
	measure  time.Duration
	sections string
	// loadgen is a prebuilt load generator; empty builds one.
	loadgen string
	keep    bool
	live    string
	// checkKeys is the keys of the checks section's runs.
	checkKeys int64
	// wideRows is the rows of the wide section's 100-dim payload (the
	// 384-dim one writes wideRows*100/384).
	wideRows int64
	// textRows is the rows of the text section's embedding job.
	textRows int64
	// backfillRows is the rows of each date of the estimate section.
	backfillRows int64
	// gpuDevice is the device the gpu section measures (cpu: a dry run of
	// its code); gpuRows the rows of its MLP jobs on that device.
	gpuDevice string
	gpuRows   int64
}

// Main runs the harness with args (the command line without the program
// name) and returns the exit status. self, when not empty, is the precog
// binary -precog defaults to (the GPU check build runs itself).
func Main(args []string, self string) int {
	var c config
	bin := "bin/precog"
	if self != "" {
		bin = self
	}
	fs := flag.NewFlagSet("precog-bench", flag.ExitOnError)
	cf := compareFlags(fs)
	chk := checkFlags(fs)
	fs.StringVar(&c.out, "out", "bench-results.md", "markdown file the results are written to")
	fs.StringVar(&c.readme, "readme", "", "markdown page (docs/benchmarks.md) whose <!-- bench-table --> block is replaced by the results (empty: none)")
	fs.StringVar(&c.work, "work", "", "scratch directory for datasets and outputs (default: a new temp dir, removed at the end)")
	fs.StringVar(&c.bin, "precog", bin, "the precog binary under test (`make build`)")
	fs.Int64Var(&c.rows, "rows", 1_000_000, "rows of the core datasets")
	fs.Int64Var(&c.feedRows, "feed-rows", 2_000_000, "rows of the feed section's null-model job and DuckDB's read-sum-write of the same files")
	fs.StringVar(&c.duckdb, "duckdb", "", "directory of DuckDB's node bindings for the feed section (`make duckdb`; empty: $"+envDuckDB+", else .cache/duckdb-"+duckdbVersion+")")
	fs.Int64Var(&c.heavyRow, "heavy-rows", 0, "rows of the heavy model's run (a compute-bound model: its rows/s settle within seconds); 0: 150000 per core, so that the run lasts about as long on any machine")
	fs.Int64Var(&c.recsRows, "recs-rows", 200_000, "rows of the recs end-to-end runs (top-50 lists into three sinks)")
	fs.Int64Var(&c.bigRows, "big-rows", 10_000_000, "rows of the large dataset of the peak-RSS comparison")
	fs.BoolVar(&c.big, "big", true, "run the peak-RSS comparison on -big-rows rows (false: skip it)")
	fs.Int64Var(&c.sinkRows, "sink-rows", 200_000, "rows written by the sink benchmarks")
	fs.DurationVar(&c.measure, "measure", 3*time.Second, "how long each raw-limit loop runs")
	fs.StringVar(&c.sections, "sections", "core,feed,sinks,lookup,cluster,checks,wide,text,estimate,objstore,gpu", "comma-separated sections to run, in this order (core, feed, sinks, lookup, cluster, checks, wide, text, estimate, objstore, gpu: skipped in one line without a usable cuda:0); -out is rewritten after each")
	fs.Int64Var(&c.checkKeys, "check-keys", 10_000_000, "keys of the checks section's runs (issue 21 asks for the check step at 10M keys)")
	fs.Int64Var(&c.wideRows, "wide-rows", 100_000, "rows of the wide section's 1 KB (100-dim) records; its 4 KB (384-dim) records are as many bytes in all")
	fs.Int64Var(&c.textRows, "text-rows", 0, "rows of the text section's embedding job (length-skewed titles); 0: 50000 per core")
	fs.Int64Var(&c.backfillRows, "backfill-rows", 1_000_000, "rows of each of the estimate section's 4 dates (ranker; the heavy model's backfill uses a twentieth)")
	fs.StringVar(&c.gpuDevice, "gpu-device", "cuda:0", "the device the gpu section measures (cpu: a dry run of the section's code on the CPU)")
	fs.Int64Var(&c.gpuRows, "gpu-rows", 8_000_000, "rows of the gpu section's MLP jobs on the device (their CPU comparisons run -heavy-rows)")
	fs.StringVar(&c.live, "live-models", "heavy,ranker,recs", "models of the live-fallback comparison, comma-separated (heavy, ranker, recs)")
	fs.StringVar(&c.loadgen, "loadgen", "", "a prebuilt cmd/precog-bench/loadgen binary (empty: go build it into the scratch directory; set it where no Go toolchain is installed)")
	fs.BoolVar(&c.keep, "keep", false, "keep the scratch directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cf.dirs != "" {
		return cf.main()
	}
	if chk.what != "" {
		return chk.main(c)
	}
	c = c.withDefaults()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	testservers.StopAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// withDefaults sizes the compute-bound runs by the machine's cores: a run
// of a fixed size that lasts 7 s on 2 cores lasts 1 s on 16, where start-up
// and the last shard's tail would weigh in the ratio as they do not on 2.
func (c config) withDefaults() config {
	if c.heavyRow <= 0 {
		c.heavyRow = 150_000 * int64(max(2, nprocs()))
	}
	if c.textRows <= 0 {
		c.textRows = 50_000 * int64(max(2, nprocs()))
	}
	return c
}

func run(ctx context.Context, c config) error {
	if c.rows < 100_000 {
		return fmt.Errorf("-rows %d: need at least 100000 (the resume test needs 10 shards of 10000 rows or more)", c.rows)
	}
	if c.feedRows < rowsPerFile {
		return fmt.Errorf("-feed-rows %d: need at least %d (one shard)", c.feedRows, rowsPerFile)
	}
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return fmt.Errorf("-precog %s: %w", c.bin, err)
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("-precog %s: %w (run `make build`)", c.bin, err)
	}
	c.bin = bin
	if c.work == "" {
		c.work, err = os.MkdirTemp("", "precog-bench-")
		if err != nil {
			return fmt.Errorf("scratch dir: %w", err)
		}
		if !c.keep {
			defer os.RemoveAll(c.work)
		}
	} else if err := os.MkdirAll(c.work, 0o755); err != nil {
		return fmt.Errorf("-work %s: %w", c.work, err)
	}
	if err := model.Init(); err != nil {
		return fmt.Errorf("onnx runtime (%s=%s): %w", model.EnvLibrary, os.Getenv(model.EnvLibrary), err)
	}
	// Children find the same library.
	if os.Getenv(model.EnvLibrary) == "" {
		if lib := model.LibraryPath(); lib != "" {
			os.Setenv(model.EnvLibrary, lib)
		}
	}
	models := filepath.Join(c.work, "models")
	for _, name := range []string{"heavy", "ranker", "recs"} {
		if _, err := testgen.Write(models, name); err != nil {
			return fmt.Errorf("model %s: %w", name, err)
		}
	}
	h := &harness{cfg: c, models: models, start: time.Now()}
	steps := map[string]func(context.Context) (*section, error){
		"core":     h.core,
		"feed":     h.feed,
		"sinks":    h.sinks,
		"lookup":   h.lookup,
		"cluster":  h.cluster,
		"checks":   h.checks,
		"wide":     h.wide,
		"text":     h.text,
		"estimate": h.estimate,
		"objstore": h.objstore,
		"gpu":      h.gpu,
	}
	var order []string
	for _, name := range strings.Split(c.sections, ",") {
		name = strings.TrimSpace(name)
		if steps[name] == nil {
			return fmt.Errorf("-sections: unknown section %q (want some of core, feed, sinks, lookup, cluster, checks, wide, text, estimate, objstore, gpu)", name)
		}
		order = append(order, name)
	}
	var secs []*section
	for _, name := range order {
		t0 := time.Now()
		slog.Info("section start", "section", name)
		s, err := steps[name](ctx)
		if s == nil {
			s = &section{Title: name}
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			// One broken section must not hide the others' numbers.
			slog.Error("section failed", "section", name, "err", err)
			s.Notes = append(s.Notes, fmt.Sprintf("**section failed**: %v", err))
		}
		slog.Info("section done", "section", name, "took", time.Since(t0).Round(time.Second))
		secs = append(secs, s)
		// The sections so far, so that a harness stopped midway (a time
		// limit, a crash) leaves what it measured.
		if err := os.WriteFile(c.out, []byte(render(secs, h.machine(), time.Since(h.start))), 0o644); err != nil {
			return fmt.Errorf("-out %s: %w", c.out, err)
		}
	}
	md := render(secs, h.machine(), time.Since(h.start))
	if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
		return fmt.Errorf("-out %s: %w", c.out, err)
	}
	if c.readme != "" {
		if err := replaceBlock(c.readme, md); err != nil {
			return err
		}
	}
	return nil
}

// harness holds what the sections share.
type harness struct {
	cfg    config
	models string
	start  time.Time
	srv    servers
	data   map[int64]string // generated datasets by row count
}

// dataset returns a dataset of rows rows, generating it on first use.
func (h *harness) dataset(rows int64) (string, error) {
	if d, ok := h.data[rows]; ok {
		return d, nil
	}
	d, err := genData(filepath.Join(h.cfg.work, fmt.Sprintf("data-%d", rows)), rows)
	if err != nil {
		return "", err
	}
	if h.data == nil {
		h.data = map[int64]string{}
	}
	h.data[rows] = d
	return d, nil
}

// machine describes where the numbers were taken.
func (h *harness) machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	nproc := runtime.NumCPU()
	if out, err := exec.Command("nproc").Output(); err == nil {
		fmt.Sscan(strings.TrimSpace(string(out)), &nproc)
	}
	return fmt.Sprintf("%s, nproc %d, %s/%s, %s, %s", cpu, nproc, runtime.GOOS, runtime.GOARCH, runtime.Version(),
		time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}

// replaceBlock puts md between the bench-table markers of the page.
func replaceBlock(path, md string) error {
	const open, close = "<!-- bench-table -->", "<!-- /bench-table -->"
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-readme %s: %w", path, err)
	}
	s := string(b)
	i := strings.Index(s, open)
	j := strings.Index(s, close)
	if i < 0 || j < i {
		return fmt.Errorf("-readme %s: no %s … %s block", path, open, close)
	}
	// Headings one level down: the page's own section holds them.
	body := strings.ReplaceAll(md, "\n## ", "\n#### ")
	body = strings.TrimPrefix(body, "# precog benchmarks\n")
	out := s[:i+len(open)] + "\n" + strings.TrimSpace(body) + "\n" + s[j:]
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return fmt.Errorf("-readme %s: %w", path, err)
	}
	return nil
}
