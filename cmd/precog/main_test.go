package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

// These tests drive the real binary, as a user does: exit codes, messages,
// kill -9 and resume. Fixtures (models, datasets) are generated once.
var (
	precogBin string
	fixtures  string
	// usersData is a string-keyed, two-date dataset, 2 files × 2000 rows each.
	usersData = testgen.Dataset{Seed: 7, StringKeys: true, Dates: []string{"2026-11-01", "2026-11-02"},
		FilesPerDate: 2, RowsPerFile: 2000, RowsPerGroup: 500}
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "precog-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	precogBin = filepath.Join(tmp, "precog")
	if out, err := exec.Command("go", "build", "-o", precogBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build precog: %v\n%s", err, out)
		return 1
	}
	if lib, err := testgen.ORTLibrary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	} else {
		os.Setenv("PRECOG_ORT_LIB", lib)
	}
	fixtures = filepath.Join(tmp, "fixtures")
	for _, name := range []string{"ranker", "recs", "heavy"} {
		if _, err := testgen.Write(filepath.Join(fixtures, "models"), name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if _, err := testgen.WriteDataset(filepath.Join(fixtures, "data", "users"), usersData); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testservers.StopAll()
	return m.Run()
}

// workdir is a fresh directory with links to the fixtures, where a test
// writes its spec and where outputs and the state dir land.
func workdir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"models", "data"} {
		if err := os.Symlink(filepath.Join(fixtures, sub), filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func symlink(oldname, newname string) error {
	if err := os.MkdirAll(filepath.Dir(newname), 0o755); err != nil {
		return err
	}
	return os.Symlink(oldname, newname)
}

func writeSpec(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type result struct {
	stdout, stderr string
	code           int
}

func precog(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return precogState(t, dir, ".precog", args...)
}

// precogState runs the binary in dir with the state dir dir/state.
func precogState(t *testing.T, dir, state string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, append([]string{"--state-dir", filepath.Join(dir, state)}, args...)...)
	cmd.Dir = dir
	// A hung command dumps its goroutines (SIGQUIT) into stderr before it is
	// killed, so the failure shows where it hung.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("precog %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// commandTimeout bounds one command of a test (PRECOG_TEST_COMMAND_TIMEOUT
// shortens it when hunting a hang).
var commandTimeout = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PRECOG_TEST_COMMAND_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Minute
}()

const rankerSpec = `name: scores
source:
  parquet: { path: "data/users/dt={{.date}}" }
  key: user_id
  rows_per_shard: 1000
model:
  path: models/ranker.onnx
  inputs:
    features: { columns: [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] }
  outputs: { score: score }
  batch_size: 256
sinks:
  parquet: { path: "out/scores/date={{.date}}" }
`

// readScores reads a published ranker output directory: key → score, and
// checks model_version/date columns on the way.
func readScores(t *testing.T, dir string) map[string]float32 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if len(files) == 0 {
		t.Fatalf("no parquet files in %s", dir)
	}
	got := map[string]float32{}
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
		tr := array.NewTableReader(tbl, 1024)
		for tr.Next() {
			rec := tr.RecordBatch()
			keys := rec.Column(rec.Schema().FieldIndices("user_id")[0]).(*array.String)
			scores := rec.Column(rec.Schema().FieldIndices("score")[0]).(*array.Float32)
			for i := 0; i < int(rec.NumRows()); i++ {
				if _, dup := got[keys.Value(i)]; dup {
					t.Errorf("duplicate key %s in %s", keys.Value(i), dir)
				}
				got[keys.Value(i)] = scores.Value(i)
			}
		}
		tr.Release()
		tbl.Release()
		rdr.Close()
	}
	return got
}

// expectedScores computes the ranker's reference output for every good key of
// date index di.
func expectedScores(t *testing.T, d testgen.Dataset, di int) map[string]float32 {
	t.Helper()
	m, err := testgen.Get("ranker")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float32{}
	d = d.Defaults()
	for fi := 0; fi < d.FilesPerDate; fi++ {
		first, n := d.Keys(di, fi)
		for k := first; k < first+n; k++ {
			row := d.Row(k)
			if row.Bad != testgen.BadNone {
				continue
			}
			out, err := m.Reference(row.Features, 1)
			if err != nil {
				t.Fatal(err)
			}
			want[testgen.KeyString(k)] = out["score"].Float32[0]
		}
	}
	return want
}

func TestRunMatchesReference(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	r := precog(t, dir, "run", spec, "--param", "date=2026-11-01")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, frag := range []string{"succeeded", "4000 in, 4000 out, 0 rejected", "parquet: ", "stages:", "infer"} {
		if !strings.Contains(r.stdout, frag) {
			t.Errorf("summary lacks %q:\n%s", frag, r.stdout)
		}
	}
	out := filepath.Join(dir, "out", "scores", "date=2026-11-01")
	if _, err := os.Stat(filepath.Join(out, "_SUCCESS")); err != nil {
		t.Errorf("_SUCCESS: %v", err)
	}
	got := readScores(t, out)
	want := expectedScores(t, usersData, 0)
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(float64(g-w)) > 1e-4 {
			t.Fatalf("key %s: got %v (present %v), want %v", k, g, ok, w)
		}
	}

	// A finished run is not resumed: the same command starts a new version
	// and replaces the directory's contents.
	r2 := precog(t, dir, "run", spec, "--param", "date=2026-11-01")
	if r2.code != 0 || strings.Contains(r2.stdout, "resumed") {
		t.Fatalf("second run: exit %d\n%s\n%s", r2.code, r2.stdout, r2.stderr)
	}
	if got2 := readScores(t, out); len(got2) != len(want) {
		t.Fatalf("after re-run: %d rows, want %d", len(got2), len(want))
	}
}

// TestResumeAfterKill kills -9 a run into all three sinks halfway and
// restarts it: the resumed output equals an uninterrupted run's, in every
// sink, with no duplicates or gaps.
func TestResumeAfterKill(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "scores"
	t.Setenv("TEST_DATABASE_URL", pg.DSN)
	t.Setenv("TEST_REDIS_ADDR", rd.Addr)
	t.Setenv("TEST_REDIS_DB", strconv.Itoa(rd.DB))
	t.Setenv("TEST_NS", ns)
	dir := workdir(t)
	// heavy in small batches and 20 small shards, each committed to three
	// sinks, is slow enough that the run is still going when killed.
	spec := writeSpec(t, dir, "job.yaml", strings.NewReplacer(
		"models/ranker.onnx", "models/heavy.onnx", "rows_per_shard: 1000", "rows_per_shard: 200",
		"batch_size: 256", "batch_size: 16").Replace(rankerSpec)+
		"  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: scores }\n"+
		"  redis: { addr: \"${TEST_REDIS_ADDR}\", db: \"${TEST_REDIS_DB}\", namespace: \"${TEST_NS}\" }\n")
	ref := precog(t, dir, "run", spec, "--param", "date=2026-11-02")
	if ref.code != 0 {
		t.Fatalf("reference run: %d %s", ref.code, ref.stderr)
	}
	out := filepath.Join(dir, "out", "scores", "date=2026-11-02")
	want := readScores(t, out)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(precogBin, "--state-dir", filepath.Join(dir, ".precog2"), "run", spec, "--param", "date=2026-11-02", "--parallel", "1")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	// Kill -9 once 6 of the 24 shards are committed in the staging dir.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		parts, _ := filepath.Glob(filepath.Join(dir, "out", "scores", ".*", "part-*.parquet"))
		if len(parts) >= 6 {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the run ended before 6 shards were seen committed (too fast to kill mid-way?): %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("run never reached 6 committed shards: %s", stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if _, err := os.Stat(filepath.Join(out, "_SUCCESS")); err == nil {
		t.Fatal("the run finished before the kill: nothing was resumed")
	}

	r := precogState(t, dir, ".precog2", "run", spec, "--param", "date=2026-11-02")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var done, total int
	_, after, found := strings.Cut(r.stdout, "resumed:")
	if _, err := fmt.Sscanf(after, "%d of %d", &done, &total); !found || err != nil || done == 0 || done >= total {
		t.Errorf("resume summary should show a partial resume (%v):\n%s", err, r.stdout)
	}
	got := readScores(t, out)
	if len(got) != len(want) {
		t.Fatalf("resumed output has %d rows, uninterrupted %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("key %s: resumed %v, uninterrupted %v", k, got[k], w)
		}
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT user_id) FROM scores").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != len(want) || distinct != len(want) {
		t.Errorf("postgres after resume: %d rows, %d distinct keys; want %d", rows, distinct, len(want))
	}
	var pgScore float32
	if err := conn.QueryRow(ctx, "SELECT score FROM scores WHERE user_id = 'user-17'").Scan(&pgScore); err != nil || pgScore != want["user-17"] {
		t.Errorf("postgres user-17: %v (%v), want %v", pgScore, err, want["user-17"])
	}
	rc := rd.Client(t)
	cur := rc.Get(ctx, ns+":current").Val()
	var keys int
	iter := rc.Scan(ctx, 0, ns+":"+cur+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys++
	}
	if keys != len(want) {
		t.Errorf("redis version %s after resume: %d keys, want %d", cur, keys, len(want))
	}
}

func TestRejectedRows(t *testing.T) {
	dir := t.TempDir()
	if _, err := testgen.Write(filepath.Join(dir, "models"), "ranker"); err != nil {
		t.Fatal(err)
	}
	few := testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000, BadFraction: 0.004}
	res, err := testgen.WriteDataset(filepath.Join(dir, "data", "few"), few)
	if err != nil {
		t.Fatal(err)
	}
	many := testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000, BadFraction: 0.2}
	if _, err := testgen.WriteDataset(filepath.Join(dir, "data", "many"), many); err != nil {
		t.Fatal(err)
	}
	if res.BadRows == 0 {
		t.Fatal("fixture has no bad rows")
	}
	spec := writeSpec(t, dir, "few.yaml", strings.NewReplacer("data/users/dt={{.date}}", "data/few", "date={{.date}}", "few").Replace(rankerSpec))
	r := precog(t, dir, "run", spec)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("%d in, %d out, %d rejected", res.Rows, res.Rows-res.BadRows, res.BadRows); !strings.Contains(r.stdout, want) {
		t.Errorf("summary lacks %q:\n%s", want, r.stdout)
	}
	rejects, _ := filepath.Glob(filepath.Join(dir, ".precog", "rejects", "*", "*.jsonl"))
	var lines int
	for _, f := range rejects {
		b, _ := os.ReadFile(f)
		lines += strings.Count(string(b), "\n")
		if !strings.Contains(string(b), `"position":"`) || !strings.Contains(string(b), "part-00000.parquet row ") {
			t.Errorf("reject lines lack a file position: %s", b)
		}
	}
	if int64(lines) != res.BadRows {
		t.Errorf("%d reject lines, want %d", lines, res.BadRows)
	}
	// Plain rejects: a header, the key first (issue 31.17: no header, the
	// key last).
	var list []struct{ ID string }
	if err := json.Unmarshal([]byte(precog(t, dir, "runs", "--json").stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("runs --json: %v %v", err, list)
	}
	plain := precog(t, dir, "rejects", list[0].ID)
	out := strings.Split(strings.TrimSpace(plain.stdout), "\n")
	if plain.code != 0 || int64(len(out)) != res.BadRows+1 || out[0] != "KEY\tSHARD\tPOSITION\tREASON" || !strings.HasPrefix(out[1], "user-") {
		t.Errorf("rejects RUN: exit %d, %d lines, want a header and %d rows, each key first:\n%s", plain.code, len(out), res.BadRows, plain.stdout)
	}

	spec = writeSpec(t, dir, "many.yaml", strings.NewReplacer("data/users/dt={{.date}}", "data/many", "date={{.date}}", "many").Replace(rankerSpec))
	r = precog(t, dir, "run", spec)
	if r.code != 1 || !strings.Contains(r.stderr, "too many rejected rows") {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "scores", "many")); !os.IsNotExist(err) {
		t.Errorf("a failed run published output: %v", err)
	}
}

func TestBackfill(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	r := precog(t, dir, "backfill", spec, "--from", "2026-11-01", "--to", "2026-11-02")
	if r.code != 0 || strings.Count(r.stderr, "succeeded") != 2 || !strings.HasPrefix(r.stdout, "scores-bf-") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("backfill: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for di, d := range usersData.Dates {
		got := readScores(t, filepath.Join(dir, "out", "scores", "date="+d))
		if want := expectedScores(t, usersData, di); len(got) != len(want) {
			t.Errorf("date %s: %d rows, want %d", d, len(got), len(want))
		}
	}
	again := precog(t, dir, "backfill", spec, "--from", "2026-11-01", "--to", "2026-11-02")
	if again.code != 0 || strings.Count(again.stderr, "already done") != 2 || again.stdout != r.stdout {
		t.Fatalf("second backfill should resume the same backfill and skip both dates: exit %d\n%s\n%s", again.code, again.stdout, again.stderr)
	}
	bad := precog(t, dir, "backfill", spec, "--from", "2026-11-03", "--to", "2026-11-01")
	if bad.code != 2 || !strings.Contains(bad.stderr, "before --from") {
		t.Errorf("reversed range: exit %d %s", bad.code, bad.stderr)
	}
	// Missing partitions: all named, nothing run, exit 2.
	miss := precog(t, dir, "backfill", spec, "--from", "2026-10-30", "--to", "2026-11-02", "--parallel", "2")
	if miss.code != 2 || !strings.Contains(miss.stderr, "2 of 4 partitions missing") ||
		!strings.Contains(miss.stderr, "date=2026-10-30") || !strings.Contains(miss.stderr, "date=2026-10-31") {
		t.Errorf("missing partitions: exit %d\n%s", miss.code, miss.stderr)
	}
	// Two dates at once, recomputed.
	par := precog(t, dir, "backfill", spec, "--from", "2026-11-01", "--to", "2026-11-02", "--parallel", "2", "--force")
	if par.code != 0 || strings.Count(par.stderr, "succeeded") != 2 || strings.Contains(par.stderr, "interrupted") {
		t.Fatalf("parallel backfill: exit %d\n%s\n%s", par.code, par.stdout, par.stderr)
	}
}
