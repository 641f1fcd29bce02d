package dashboard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestSpecViewRedactsCredentials records a run whose spec has credentials
// written literally (a Postgres URL, a key=value DSN, a Redis URL and a
// password field) and a shard error quoting one: the run page and its live
// part show none of them, and the ${…} reference stays readable.
func TestSpecViewRedactsCredentials(t *testing.T) {
	const pw = "L1teral-Secret"
	l, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	r, shards := newRun("recs", 2)
	r.Spec = []byte("name: recs\nsource:\n  postgres: { dsn: \"host=db user=app password=" + pw + " dbname=f\", query: q }\nsinks:\n" +
		"  postgres: { dsn: \"postgres://app:" + pw + "@db:5432/preds\", table: t }\n" +
		"  redis: { addr: \"redis://:" + pw + "@127.0.0.1:6379/0\", password: " + pw + ", namespace: recs }\n" +
		"  # features: { dsn: \"${FEATURES_DSN}\" }\n")
	if err := l.CreateRun(ctx, r, shards); err != nil {
		t.Fatal(err)
	}
	sh, err := l.Claim(ctx, r.ID, "w1", lease)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: sh.Index, Worker: "w1", Msg: "connect postgres://app:" + pw + "@db:5432/preds: refused", Retry: false, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, Options{Source: Shared{L: l}})
	for _, p := range []string{"/runs/" + r.ID, "/runs/" + r.ID + "?part=live", "/api/runs/" + r.ID, "/"} {
		code, body, _ := get(t, ts, p, token)
		if code != 200 {
			t.Fatalf("GET %s = %d", p, code)
		}
		if strings.Contains(body, pw) {
			t.Errorf("GET %s shows the password", p)
		}
	}
	_, body, _ := get(t, ts, "/runs/"+r.ID, token)
	if !strings.Contains(body, "[REDACTED]") || !strings.Contains(body, "${FEATURES_DSN}") || !strings.Contains(body, "db:5432/preds") {
		t.Errorf("the spec view lost more than the credentials:\n%s", body)
	}
}

// TestJobsPageNeedsNoSinkSecrets: the jobs page lists a job whose sinks
// read ${…} variables that are not set where the dashboard runs.
func TestJobsPageNeedsNoSinkSecrets(t *testing.T) {
	dir := t.TempDir()
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	jobsDir := filepath.Join(dir, "jobs")
	os.MkdirAll(jobsDir, 0o755)
	spec := "name: unsetsecrets\nschedule: \"30 2 * * *\"\nsource:\n  parquet: { path: data/x.parquet }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { y: y }\n" +
		"sinks:\n  postgres: { dsn: \"${PRECOG_TEST_UNSET_DATABASE_URL}\", table: t }\n  redis: { addr: \"${PRECOG_TEST_UNSET_REDIS_ADDR}\", namespace: s }\n"
	if err := os.WriteFile(filepath.Join(jobsDir, "s.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, Options{Source: Shared{L: l}, JobsDir: jobsDir})
	code, body, _ := get(t, ts, "/jobs", token)
	if code != 200 || !strings.Contains(body, "unsetsecrets") || strings.Contains(body, "is not set") || strings.Contains(body, "No job specs") {
		t.Fatalf("jobs page = %d:\n%s", code, body)
	}
}
