package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/runview"
)

// These tests replay the data-safety failures reported against the first
// release (issue #11) through the real binary.

// TestParquetNeverDeletesUserFiles: a publish replaces only a directory
// precog published itself; a user's directory, `date=.` and a sink on top of
// the source are refused by validate and run, and nothing is touched.
func TestParquetNeverDeletesUserFiles(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	user := filepath.Join(dir, "out", "scores", "date=2026-11-01")
	writeFile(t, dir, "out/scores/date=2026-11-01/important.txt", "mine\n")
	for _, verb := range []string{"validate", "run"} {
		r := precog(t, dir, verb, spec, "--param", "date=2026-11-01")
		if r.code != 2 || !strings.Contains(r.stderr, user) || !strings.Contains(r.stderr, "not created by precog") {
			t.Errorf("%s into a user's directory: exit %d, want 2 naming %s:\n%s", verb, r.code, user, r.stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(user, "important.txt")); err != nil || string(b) != "mine\n" {
		t.Fatalf("important.txt after the refused run: %q, %v", b, err)
	}

	// --param date=. would make out/scores/date=. the parent of every date.
	dot := writeSpec(t, dir, "dot.yaml", strings.Replace(rankerSpec, "out/scores/date={{.date}}", "out/{{.date}}", 1))
	for _, verb := range []string{"validate", "run"} {
		if r := precog(t, dir, verb, dot, "--param", "date=."); r.code != 2 || !strings.Contains(r.stderr, `"."`) {
			t.Errorf("%s --param date=.: exit %d, want 2:\n%s", verb, r.code, r.stderr)
		}
	}

	// A sink path equal to the source directory.
	same := writeSpec(t, dir, "same.yaml", strings.Replace(rankerSpec, "out/scores/date={{.date}}", "data/users/dt={{.date}}", 1))
	for _, verb := range []string{"validate", "run"} {
		if r := precog(t, dir, verb, same, "--param", "date=2026-11-01"); r.code != 2 || !strings.Contains(r.stderr, "sinks.parquet.path") {
			t.Errorf("%s with the sink on the source: exit %d, want 2 naming sinks.parquet.path:\n%s", verb, r.code, r.stderr)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "data", "users", "dt=2026-11-01", "*.parquet")); len(files) != 2 {
		t.Fatalf("the source has %d files after the refused run, want 2", len(files))
	}

	// A directory precog published is replaced by the next run of the job.
	fresh := writeSpec(t, dir, "fresh.yaml", strings.Replace(rankerSpec, "out/scores/", "out/fresh/", 1))
	for range 2 {
		if r := precog(t, dir, "run", fresh, "--param", "date=2026-11-01"); r.code != 0 {
			t.Fatalf("run into a new directory: exit %d\n%s", r.code, r.stderr)
		}
	}
	if got := readScores(t, filepath.Join(dir, "out", "fresh", "date=2026-11-01")); len(got) != 4000 {
		t.Fatalf("re-run published %d keys, want 4000", len(got))
	}
}

// badRowsFile writes a ranker-shaped Parquet file whose rows are fine
// except those listed in bad (row → key, nil for a null key) and huge (rows
// whose features overflow the model into a non-finite score).
func badRowsFile(t *testing.T, path string, n int, bad map[int]*string, huge map[int]bool) {
	badRowsFileKeys(t, path, "user-", n, bad, huge)
}

// badRowsFileKeys is badRowsFile with keys prefix+row.
func badRowsFileKeys(t *testing.T, path, prefix string, n int, bad map[int]*string, huge map[int]bool) {
	t.Helper()
	fields := []arrow.Field{{Name: "user_id", Type: arrow.BinaryTypes.String, Nullable: true}}
	for i := range 16 {
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("f%d", i), Type: arrow.PrimitiveTypes.Float32})
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for r := range n {
		kb := b.Field(0).(*array.StringBuilder)
		if k, ok := bad[r]; ok {
			if k == nil {
				kb.AppendNull()
			} else {
				kb.Append(*k)
			}
		} else {
			kb.Append(fmt.Sprintf("%s%d", prefix, r))
		}
		for c := range 16 {
			v := float32(math.Sin(float64(r*16 + c)))
			if huge[r] {
				v = math.MaxFloat32
				if c%2 == 1 {
					v = -math.MaxFloat32
				}
			}
			b.Field(c + 1).(*array.Float32Builder).Append(v)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func strp(s string) *string { return &s }

// TestBadKeysAndOutputsAreRejects: a null key, an empty key, a NUL byte,
// invalid UTF-8, a 1 MiB key and a NaN model output each reject their row,
// naming the file, row and reason, instead of failing the run (or, for the
// long key, failing the Postgres index build after Parquet published).
func TestBadKeysAndOutputsAreRejects(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	bad := map[int]*string{3: nil, 10: strp(""), 20: strp("a\x00b"), 30: strp("\xff\xfe"), 40: strp(strings.Repeat("k", 1<<20))}
	badRowsFile(t, filepath.Join(dir, "in", "part-0.parquet"), 2000, bad, map[int]bool{50: true})
	body := strings.NewReplacer("data/users/dt={{.date}}", "in", "out/scores/date={{.date}}", "out/bad").Replace(rankerSpec) +
		"  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: scores }\n"
	spec := writeSpec(t, dir, "job.yaml", body)
	r := precogEnv(t, dir, []string{"TEST_DATABASE_URL=" + pg.DSN}, "run", spec)
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "2000 in, 1994 out, 6 rejected") {
		t.Errorf("summary lacks the 6 rejects:\n%s", r.stdout)
	}
	rejects, _ := filepath.Glob(filepath.Join(dir, ".precog", "rejects", "*", "*.jsonl"))
	var all strings.Builder
	for _, f := range rejects {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	for _, want := range []string{"part-0.parquet row 3", "null key", "row 10", "empty key", "row 20", "NUL byte",
		"row 30", "not valid UTF-8", "row 40", "more than the 512", "row 50", "model output score: NaN"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("rejects lack %q:\n%.2000s", want, all.String())
		}
	}
	got := readScores(t, filepath.Join(dir, "out", "bad"))
	if len(got) != 1994 {
		t.Errorf("parquet holds %d keys, want 1994", len(got))
	}
	conn, err := pgx.Connect(context.Background(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM scores").Scan(&n); err != nil || n != 1994 {
		t.Errorf("postgres view holds %d rows (%v), want 1994", n, err)
	}

	// status shows the rejects from the ledger: the embedded one, and the
	// Postgres one after the same job ran on it (precog run --db works as
	// a cluster worker does), with the bad keys escaped for jsonb.
	wantRejectSample(t, dir)
	ledgerDSN := testservers.Postgres(t).DSN
	if r := precog(t, dir, "run", spec, "--db", ledgerDSN, "--no-progress"); r.code != 0 {
		t.Fatalf("run --db: exit %d\n%s", r.code, r.stderr)
	}
	wantRejectSample(t, dir, "--db", ledgerDSN)
}

// wantRejectSample checks the reject sample `precog status --json` and
// `precog status` show of the newest run of TestBadKeysAndOutputsAreRejects
// (in the ledger that args name): every reject with its file, row, reason
// and key, by row.
func wantRejectSample(t *testing.T, dir string, args ...string) {
	t.Helper()
	r := precog(t, dir, append([]string{"runs", "--json", "-n", "1"}, args...)...)
	var runs []runview.Run
	if err := json.Unmarshal([]byte(r.stdout), &runs); r.code != 0 || err != nil || len(runs) != 1 {
		t.Fatalf("runs --json %v: exit %d %v\n%s%s", args, r.code, err, r.stdout, r.stderr)
	}
	id := runs[0].ID
	r = precog(t, dir, append([]string{"status", id, "--json"}, args...)...)
	var st runview.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || st.ID != id || st.Rejected != 6 {
		t.Fatalf("status --json %v: exit %d %v\n%s%s", args, r.code, err, r.stdout, r.stderr)
	}
	want := []struct {
		row         int
		reason, key string
	}{{3, "null key", ""}, {10, "empty key", ""}, {20, "NUL byte", `"a\x00b"`}, {30, "not valid UTF-8", `"\xff\xfe"`},
		{40, "more than the 512", "kkkk"}, {50, "model output score: NaN", "user-50"}}
	if len(st.RejectSample) != len(want) {
		t.Fatalf("status --json %v: reject_sample has %d entries, want %d: %+v", args, len(st.RejectSample), len(want), st.RejectSample)
	}
	for i, w := range want {
		got := st.RejectSample[i]
		if got.Shard != 0 || !strings.HasSuffix(got.Position, fmt.Sprintf("part-0.parquet row %d", w.row)) || !strings.Contains(got.Reason, w.reason) ||
			!strings.HasPrefix(got.Key, w.key) || len(got.Key) > jobs.RejectFieldMax || (w.key == "" && got.Key != "") {
			t.Errorf("status --json %v: reject_sample[%d] = %+v, want shard 0, row %d, reason %q, key %q", args, i, got, w.row, w.reason, w.key)
		}
	}
	r = precog(t, dir, append([]string{"status", id}, args...)...)
	if r.code != 0 || !regexp.MustCompile(`6 rejected\nrejects +shard 0, \S*part-0\.parquet row 3: column user_id: null key \(key ""\)`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "… 1 more: precog rejects "+id+" lists every stored one") {
		t.Errorf("status %v lacks the reject sample under the rows line: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
}

// TestDuplicateKeyPublishesNothing: a key in two shards fails the run at
// Postgres's stage (naming the key), and neither Parquet nor Redis publishes:
// the publish is two-phase across sinks. Within one shard, duplicate_keys:
// reject turns the repeat into a reject.
func TestDuplicateKeyPublishesNothing(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "dup"
	dir := workdir(t)
	// Two files (two shards) that share one key, a-7.
	badRowsFileKeys(t, filepath.Join(dir, "in", "part-0.parquet"), "a-", 500, nil, nil)
	badRowsFileKeys(t, filepath.Join(dir, "in", "part-1.parquet"), "b-", 500, map[int]*string{0: strp("a-7")}, nil)
	body := strings.NewReplacer("data/users/dt={{.date}}", "in", "out/scores/date={{.date}}", "out/dup").Replace(rankerSpec) +
		"  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: scores }\n" +
		"  redis: { addr: \"${TEST_REDIS_ADDR}\", db: \"${TEST_REDIS_DB}\", namespace: \"${TEST_NS}\", ttl: 1h }\n"
	spec := writeSpec(t, dir, "job.yaml", body)
	env := sinkEnv(pg.DSN, rd, ns)
	r := precogEnv(t, dir, env, "run", spec)
	if r.code != 1 || !strings.Contains(r.stderr, `duplicate key "a-7"`) || !strings.Contains(r.stderr, "nothing was published") {
		t.Fatalf("run with a key in two shards: exit %d, want 1 naming a-7:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "dup")); !os.IsNotExist(err) {
		t.Errorf("parquet published although postgres failed to stage: %v", err)
	}
	if v, err := rd.Client(t).Get(context.Background(), ns+":current").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("redis published %q (%v) although postgres failed to stage", v, err)
	}

	// Within one shard: exact, both rows named; reject policy keeps the first.
	badRowsFile(t, filepath.Join(dir, "one", "part-0.parquet"), 500, map[int]*string{9: strp("user-2")}, nil)
	one := strings.NewReplacer("data/users/dt={{.date}}", "one", "out/scores/date={{.date}}", "out/one").Replace(rankerSpec)
	spec = writeSpec(t, dir, "one.yaml", one)
	r = precog(t, dir, "run", spec)
	if r.code != 1 || !strings.Contains(r.stderr, `duplicate key "user-2"`) || !strings.Contains(r.stderr, "part-0.parquet row 2") || !strings.Contains(r.stderr, "part-0.parquet row 9") {
		t.Fatalf("duplicate within a shard: exit %d, want 1 naming both rows:\n%s", r.code, r.stderr)
	}
	spec = writeSpec(t, dir, "one-reject.yaml", one+"duplicate_keys: reject\n")
	if r = precog(t, dir, "run", spec, "--restart"); r.code != 0 || !strings.Contains(r.stdout, "500 in, 499 out, 1 rejected") {
		t.Fatalf("duplicate_keys: reject: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestTwoWritersOneTarget: a second `precog run` of the same job and params
// from another state directory (so another ledger) is refused, naming the
// first writer, while the first is running; the first then finishes whole.
func TestTwoWritersOneTarget(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", strings.Replace(rankerSpec, "rows_per_shard: 1000", "rows_per_shard: 200", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := exec.CommandContext(ctx, precogBin, "--state-dir", filepath.Join(dir, "state-a"), "--log-level", "debug",
		"run", spec, "--param", "date=2026-11-01", "--parallel", "1")
	first.Dir = dir
	stderr, err := first.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	// Freeze the first writer once it committed a shard: it holds the locks.
	sc := bufio.NewScanner(stderr)
	var runID string
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "run=scores-"); i >= 0 && runID == "" {
			runID = strings.Fields(line[i+4:])[0]
		}
		if strings.Contains(line, "shard committed") {
			break
		}
	}
	if runID == "" {
		t.Fatal("the first run logged no run id before committing a shard")
	}
	if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stderr)
	r := precogState(t, dir, "state-b", "run", spec, "--param", "date=2026-11-01")
	if r.code == 0 || !strings.Contains(r.stderr, runID) || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", first.Process.Pid)) {
		t.Errorf("second writer: exit %d, want a refusal naming run %s and pid %d:\n%s", r.code, runID, first.Process.Pid, r.stderr)
	}
	if err := first.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	if got := readScores(t, filepath.Join(dir, "out", "scores", "date=2026-11-01")); len(got) != 4000 {
		t.Fatalf("published %d keys, want 4000", len(got))
	}
}
