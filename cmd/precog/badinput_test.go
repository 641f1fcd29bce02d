package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/precog-ml/precog/internal/testgen"
)

// TestBadInputs is the corpus of bad inputs: each gets a clear error naming
// the field, file or column, a stable exit code, and publishes nothing.
func TestBadInputs(t *testing.T) {
	replace := func(pairs ...string) func(string) string {
		return func(s string) string { return strings.NewReplacer(pairs...).Replace(s) }
	}
	cases := []struct {
		name  string
		edit  func(string) string
		setup func(t *testing.T, dir string)
		args  []string // after the spec; default --param date=2026-11-01
		code  int
		want  []string
	}{
		{name: "missing parquet path", edit: replace("data/users/dt={{.date}}", "data/nope"),
			code: 2, want: []string{"data/nope"}},
		{name: "corrupt parquet (garbage)", edit: replace("data/users/dt={{.date}}", "bad/garbage.parquet"),
			setup: func(t *testing.T, dir string) { corrupt(t, dir, "bad/garbage.parquet", testgen.CorruptGarbage) },
			code:  2, want: []string{"garbage.parquet"}},
		{name: "corrupt parquet (truncated)", edit: replace("data/users/dt={{.date}}", "bad/cut.parquet"),
			setup: func(t *testing.T, dir string) { corrupt(t, dir, "bad/cut.parquet", testgen.CorruptTruncated) },
			code:  2, want: []string{"cut.parquet"}},
		{name: "empty (zero-byte) parquet file", edit: replace("data/users/dt={{.date}}", "bad/empty.parquet"),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "bad/empty.parquet", "") },
			code:  2, want: []string{"empty.parquet"}},
		{name: "missing input column", edit: replace("f3,", "f3x,"),
			code: 2, want: []string{`model.inputs.features.columns[3]`, `"f3x" not in source schema`}},
		{name: "string column where float expected", edit: replace("f3,", "user_id,"),
			code: 2, want: []string{"user_id", "string"}},
		{name: "missing key column", edit: replace("key: user_id", "key: uid"),
			code: 2, want: []string{"source.key", `"uid"`}},
		{name: "model file missing", edit: replace("models/ranker.onnx", "models/nope.onnx"),
			code: 2, want: []string{"nope.onnx"}},
		{name: "model file is a FIFO", edit: replace("models/ranker.onnx", "fifo.onnx"),
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "fifo.onnx"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			code: 2, want: []string{"model.path", "fifo.onnx: not a regular file (a named pipe)"}},
		{name: "unused param", args: []string{"--param", "date=2026-11-01", "--param", "dte=2026-11-01"},
			code: 2, want: []string{"--param dte: not used by the job spec (it uses: date)"}},
		{name: "model file not ONNX", edit: replace("models/ranker.onnx", "notonnx.onnx"),
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "notonnx.onnx", "this is not a model\n") },
			code:  2, want: []string{"notonnx.onnx"}},
		{name: "input name not in model", edit: replace("    features: { columns", "    featurez: { columns"),
			code: 2, want: []string{"featurez"}},
		{name: "input shape vs column count", edit: replace(", f15]", "]"),
			code: 2, want: []string{"model.inputs.features", "15"}},
		{name: "output name not in model", edit: replace("outputs: { score: score }", "outputs: { scorez: score }"),
			code: 2, want: []string{"scorez"}},
		{name: "unknown top-level field", edit: func(s string) string { return s + "retries: 3\n" },
			code: 2, want: []string{"retries"}},
		{name: "unknown nested field", edit: replace(`parquet: { path: "out`, `parquet: { compresion: zstd, path: "out`),
			code: 2, want: []string{"compresion"}},
		{name: "template param not given", args: []string{},
			code: 2, want: []string{"date"}},
		{name: "unknown template param", edit: replace("dt={{.date}}", "dt={{.day}}"),
			code: 2, want: []string{"day"}},
		{name: "param escaping the path", args: []string{"--param", "date=../../etc"},
			code: 2, want: []string{"date"}},
		{name: "malformed --param", args: []string{"--param", "date"},
			code: 2, want: []string{"date"}},
		{name: "negative batch size", edit: replace("batch_size: 256", "batch_size: -5"),
			code: 2, want: []string{"model.batch_size"}},
		{name: "bad job name", edit: replace("name: scores", "name: Scores Job"),
			code: 2, want: []string{"name"}},
		{name: "undefined env var", edit: func(s string) string {
			return s + "  postgres: { dsn: \"${PRECOG_TEST_UNSET_DSN}\", table: scores }\n"
		}, code: 2, want: []string{"PRECOG_TEST_UNSET_DSN"}},
		{name: "output field collides with key", edit: replace("outputs: { score: score }", "outputs: { score: user_id }"),
			code: 2, want: []string{"user_id"}},
		{name: "bad cron schedule", edit: func(s string) string { return s + "schedule: \"every day\"\n" },
			code: 2, want: []string{"schedule"}},
		{name: "cuda on a CPU-only runtime", edit: replace("batch_size: 256", "batch_size: 256\n  device: cuda:0"),
			code: 2, want: []string{"cuda"}},
		{name: "yaml syntax error", edit: func(s string) string { return s + "model: [\n" },
			code: 2, want: []string{"job.yaml"}},
		{name: "spec file missing", args: []string{"--param", "date=2026-11-01", "--spec-missing"},
			code: 2, want: []string{"missing.yaml"}},
	}
	if len(cases) < 20 {
		t.Fatalf("the corpus must hold at least 20 bad inputs, has %d", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := workdir(t)
			body := rankerSpec
			if tc.edit != nil {
				body = tc.edit(body)
			}
			spec := writeSpec(t, dir, "job.yaml", body)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			args := tc.args
			if args == nil {
				args = []string{"--param", "date=2026-11-01"}
			}
			if len(args) > 0 && args[len(args)-1] == "--spec-missing" {
				spec = filepath.Join(dir, "missing.yaml")
				args = args[:len(args)-1]
			}
			for _, verb := range []string{"validate", "run"} {
				r := precog(t, dir, append([]string{verb, spec}, args...)...)
				if r.code != tc.code {
					t.Errorf("%s: exit %d, want %d\nstderr: %s", verb, r.code, tc.code, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%s: stderr lacks %q:\n%s", verb, w, r.stderr)
					}
				}
				if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
					t.Errorf("%s panicked:\n%s", verb, r.stderr)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
				t.Errorf("bad input published output (stat out: %v)", err)
			}
		})
	}
}

func TestZeroRowDataset(t *testing.T) {
	dir := workdir(t)
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testgen.WriteEmpty(filepath.Join(dir, "empty", "part-00000.parquet"), testgen.Dataset{StringKeys: true}); err != nil {
		t.Fatal(err)
	}
	spec := writeSpec(t, dir, "job.yaml", strings.NewReplacer("data/users/dt={{.date}}", "empty").Replace(rankerSpec))
	v := precog(t, dir, "validate", spec, "--param", "date=2026-11-01")
	if v.code != 0 || !strings.Contains(v.stdout, "zero rows") {
		t.Fatalf("validate: exit %d\n%s\n%s", v.code, v.stdout, v.stderr)
	}
	r := precog(t, dir, "run", spec, "--param", "date=2026-11-01")
	if r.code != 0 || !strings.Contains(r.stdout, "0 in, 0 out, 0 rejected") || !strings.Contains(r.stdout, "zero rows") {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "scores", "date=2026-11-01", "_SUCCESS")); err != nil {
		t.Errorf("empty run not published: %v", err)
	}
}

func TestValidatePrintsPlanAndInspect(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	r := precog(t, dir, "validate", spec, "--param", "date=2026-11-01")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// The batch (the spec's) and the shards in flight the device chose.
	for _, w := range []string{"valid", "on cpu: 256 rows a call, ", " sessions, 2 shards in flight here by default", "shard plan: 4 shards, 4000 rows", "part-00000.parquet", "score"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("validate output lacks %q:\n%s", w, r.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Error("validate wrote output")
	}
	in := precog(t, dir, "inspect", filepath.Join(dir, "models", "recs.onnx"))
	if in.code != 0 {
		t.Fatalf("inspect: exit %d: %s", in.code, in.stderr)
	}
	for _, w := range []string{"features", "topk_items", "int64", "topk_scores", "float32"} {
		if !strings.Contains(in.stdout, w) {
			t.Errorf("inspect output lacks %q:\n%s", w, in.stdout)
		}
	}
	h := precog(t, dir, "run", "--help")
	if h.code != 0 || !strings.Contains(h.stdout, "resumes") || !strings.Contains(h.stdout, "--param") {
		t.Errorf("run --help does not teach: %s", h.stdout)
	}
	u := precog(t, dir, "run")
	if u.code != 2 {
		t.Errorf("run without a spec: exit %d, want 2", u.code)
	}
}

func corrupt(t *testing.T, dir, rel string, c testgen.Corruption) {
	t.Helper()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testgen.WriteCorrupt(path, c); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, dir, rel, body string) {
	t.Helper()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableSinks(t *testing.T) {
	dir := workdir(t)
	body := rankerSpec + "  redis: { addr: \"127.0.0.1:1\", namespace: scores, timeout: 500ms }\n" +
		"  postgres: { dsn: \"postgres://precog:s3cret@127.0.0.1:1/x?connect_timeout=1\", table: scores }\n"
	spec := writeSpec(t, dir, "job.yaml", body)
	for _, verb := range []string{"validate", "run"} {
		r := precog(t, dir, verb, spec, "--param", "date=2026-11-01")
		if r.code != 75 || !strings.Contains(r.stderr, "127.0.0.1:1") {
			t.Errorf("%s: exit %d, want 75 (unavailable, retry later); stderr %s", verb, r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "s3cret") {
			t.Errorf("%s: the password leaked: %s", verb, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Error("published with unreachable sinks")
	}
}
