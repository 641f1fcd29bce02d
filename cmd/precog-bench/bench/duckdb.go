package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/jobs"
)

// duckdbVersion is the DuckDB release whose node bindings `make duckdb`
// fetches (scripts/duckdb.sh pins their sums; TestDuckDBVersionPinned keeps
// the two equal).
const duckdbVersion = "1.5.6-r.1"

// envDuckDB names the directory `make duckdb` filled (the Makefile's bench
// target sets it); without it the bench looks in .cache/duckdb-<version>.
const envDuckDB = "PRECOG_DUCKDB_DIR"

// duckfeedJS is the node script that runs DuckDB's statement; the harness
// writes it into its scratch directory, so a bench binary needs no source tree.
//
//go:embed duckfeed.js
var duckfeedJS []byte

// duckJob is DuckDB's side of the feed row: read Files, sum Features per
// row, write Key and the sum as score to Out (one Snappy Parquet file) on
// Threads threads.
type duckJob struct {
	Files    []string
	Out      string
	Key      string
	Features []string
	Threads  int
	// Tail also writes precog's bookkeeping columns (jobs.OutputTail):
	// model_version, a constant string of ModelVersion, and computed_at,
	// the statement's start time (TIMESTAMPTZ, µs, as precog's).
	Tail         bool
	ModelVersion string
}

// sql is the job's COPY statement: the key and score columns precog's null
// job writes (the sum of FLOAT features is a FLOAT, as the model's float32),
// and with Tail its other two.
func (j duckJob) sql() (string, error) {
	switch {
	case len(j.Files) == 0:
		return "", errors.New("duckdb job: no input files")
	case j.Out == "":
		return "", errors.New("duckdb job: no output path")
	case j.Key == "":
		return "", errors.New("duckdb job: no key column")
	case len(j.Features) == 0:
		return "", errors.New("duckdb job: no feature columns")
	case j.Threads < 1:
		return "", fmt.Errorf("duckdb job: threads %d: want at least 1", j.Threads)
	case j.Tail && j.ModelVersion == "":
		return "", errors.New("duckdb job: the bookkeeping columns need a model version")
	}
	files := make([]string, len(j.Files))
	for i, f := range j.Files {
		files[i] = sqlString(f)
	}
	sum := make([]string, len(j.Features))
	for i, f := range j.Features {
		sum[i] = sqlIdent(f)
	}
	tail := ""
	if j.Tail {
		tail = fmt.Sprintf(", %s AS %s, now() AS %s", sqlString(j.ModelVersion), sqlIdent(jobs.ColModelVersion), sqlIdent(jobs.ColComputedAt))
	}
	return fmt.Sprintf("COPY (SELECT %s, %s AS score%s FROM read_parquet([%s])) TO %s (FORMAT parquet, COMPRESSION snappy)",
		sqlIdent(j.Key), strings.Join(sum, " + "), tail, strings.Join(files, ", "), sqlString(j.Out)), nil
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// sqlIdent quotes s as an SQL identifier.
func sqlIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// duckDB is where the bench finds node and DuckDB's bindings.
type duckDB struct {
	node        string // the node executable
	nodeModules string // NODE_PATH: make duckdb's node_modules
	script      string // duckfeed.js, written into the scratch directory
}

// findDuckDB locates node and `make duckdb`'s packages under dir (empty:
// $PRECOG_DUCKDB_DIR, else .cache/duckdb-<version>) and writes the script
// into work. Its error names what is missing and `make duckdb`.
func findDuckDB(dir, work string) (duckDB, error) {
	if dir == "" {
		dir = os.Getenv(envDuckDB)
	}
	if dir == "" {
		dir = filepath.Join(".cache", "duckdb-"+duckdbVersion)
	}
	nm, err := filepath.Abs(filepath.Join(dir, "node_modules"))
	if err != nil {
		return duckDB{}, err
	}
	if _, err := os.Stat(filepath.Join(nm, "@duckdb", "node-api", "package.json")); err != nil {
		return duckDB{}, fmt.Errorf("DuckDB %s's node bindings are not in %s (run `make duckdb`, or set %s to its directory): %w",
			duckdbVersion, nm, envDuckDB, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return duckDB{}, fmt.Errorf("node (Node.js, which runs DuckDB's bindings for the feed row) is not on PATH: %w; install it, then `make duckdb`", err)
	}
	script := filepath.Join(work, "duckfeed.js")
	if err := os.WriteFile(script, duckfeedJS, 0o644); err != nil {
		return duckDB{}, err
	}
	return duckDB{node: node, nodeModules: nm, script: script}, nil
}

// procStats is one process's cost: wall time from spawn to exit and its
// user+system CPU time.
type procStats struct {
	Wall time.Duration
	CPU  time.Duration
	Rows int64
}

// best is the faster wall and the lesser CPU of p and q (a zero p is none).
func (p procStats) best(q procStats) procStats {
	if p.Wall == 0 || q.Wall < p.Wall {
		p.Wall = q.Wall
	}
	if p.CPU == 0 || q.CPU < p.CPU {
		p.CPU = q.CPU
	}
	p.Rows = q.Rows
	return p
}

// run runs j as a node process and checks its output: the rows DuckDB says
// it wrote, the Parquet file's own row count and the threads it ran with
// must be what was asked.
func (d duckDB) run(ctx context.Context, j duckJob, wantRows int64) (procStats, error) {
	sql, err := j.sql()
	if err != nil {
		return procStats{}, err
	}
	os.Remove(j.Out)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, d.node, d.script, fmt.Sprint(j.Threads), sql)
	cmd.Env = append(os.Environ(), "NODE_PATH="+d.nodeModules)
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err = cmd.Run()
	st := procStats{Wall: time.Since(t0)}
	if cmd.ProcessState != nil {
		st.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return st, fmt.Errorf("duckdb (node %s): %w: %s", d.script, err, tail(strings.TrimSpace(errb.String()), 2000))
	}
	var res struct {
		Rows    int64 `json:"rows"`
		Threads int   `json:"threads"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return st, fmt.Errorf("duckdb: its output %q: %w", tail(out.String(), 200), err)
	}
	if res.Threads != j.Threads {
		return st, fmt.Errorf("duckdb ran on %d threads, asked %d", res.Threads, j.Threads)
	}
	written, err := parquetRows(j.Out)
	if err != nil {
		return st, fmt.Errorf("duckdb's output: %w", err)
	}
	if res.Rows != wantRows || written != wantRows {
		return st, fmt.Errorf("duckdb copied %d rows and its file %s holds %d; the input has %d", res.Rows, j.Out, written, wantRows)
	}
	st.Rows = written
	return st, nil
}

// parquetRows is a Parquet file's row count from its footer.
func parquetRows(path string) (int64, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return 0, err
	}
	defer pf.Close()
	return pf.NumRows(), nil
}
