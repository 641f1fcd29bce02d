package jobs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseSpec: Parse never panics, and every error it returns is made of
// *SpecError (YAML syntax errors included, wrapped with the file name).
func FuzzParseSpec(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "contract1.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(baseSpec))
	f.Add([]byte(baseSpec + "  redis: { addr: \"${REDIS_ADDR}\", namespace: recs, ttl: 48h, db: 1 }\n  postgres: { dsn: \"${X:-y}\", table: t, vector: [score] }\n"))
	f.Add([]byte(baseSpec + "schedule: '*/5 * * * *'\ntimezone: Europe/Paris\nserving: { features: { dsn: x, table: s.f }, writeback_ttl: 1m }\n"))
	f.Add([]byte("a: &a [x, x]\nb: &b [*a, *a]\nmodel: {inputs: {x: {columns: *b}}}\n"))
	f.Add([]byte("name: [\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("source: {parquet: {path: '{{.date}}{{if .x}}{{end}}'}}\n"))
	env := lookup(testEnv)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "job.yaml", dateParam, env)
		if err != nil {
			if s != nil {
				t.Fatal("spec and error both returned")
			}
			checkAllSpecErrors(t, err)
			if !strings.HasPrefix(err.Error(), "job.yaml: ") {
				t.Fatalf("error does not name the file: %q", err)
			}
			return
		}
		// A valid spec satisfies the invariants validation promises.
		if s.Model.BatchSize < 1 || s.Model.BatchSize > MaxBatchSize || s.Source.RowsPerShard < 1 ||
			s.Retry.MaxAttempts < 1 || len(s.Model.Inputs) == 0 || len(s.Model.Outputs) == 0 || s.Source.Kind() == "" {
			t.Fatalf("invalid spec accepted: %+v", s)
		}
		if len(s.Hash()) != 64 {
			t.Fatal("bad hash")
		}
	})
}

// checkAllSpecErrors fails unless err is a *SpecError or a join of them.
func checkAllSpecErrors(t *testing.T, err error) {
	t.Helper()
	var se *SpecError
	if errors.As(err, &se) && err == error(se) {
		return
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T is neither a *SpecError nor a join: %v", err, err)
	}
	for _, e := range j.Unwrap() {
		if _, ok := e.(*SpecError); !ok {
			t.Fatalf("joined error %T is not a *SpecError: %v", e, e)
		}
	}
}
