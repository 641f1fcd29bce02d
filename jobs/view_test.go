package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const viewSpec = `name: scores
schedule: "0 6 * * *"
source:
  parquet: { path: data/x.parquet }
  key: id
model:
  path: m.onnx
  inputs: { x: { columns: [a] } }
  outputs: { y: y }
sinks:
  postgres: { dsn: "${PRECOG_VIEWTEST_DSN}", table: t }
  redis: { addr: "redis://:${PRECOG_VIEWTEST_PW}@127.0.0.1:6379/0", db: "${PRECOG_VIEWTEST_DB}", password: "${PRECOG_VIEWTEST_PW}", namespace: scores }
`

// TestLoadForViewNeedsNoSecrets: a read-only view loads a spec whose sinks'
// variables are unset (Load refuses it), and never expands a connection
// field even when its variable is set.
func TestLoadForViewNeedsNoSecrets(t *testing.T) {
	p := filepath.Join(t.TempDir(), "scores.yaml")
	if err := os.WriteFile(p, []byte(viewSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p, nil); err == nil || !strings.Contains(err.Error(), "PRECOG_VIEWTEST_DSN is not set") {
		t.Fatalf("Load without the secrets = %v, want an unset-variable error", err)
	}
	s, err := LoadForView(p, nil)
	if err != nil {
		t.Fatalf("LoadForView without the secrets: %v", err)
	}
	if s.Name != "scores" || s.Schedule != "0 6 * * *" || s.Sinks.Postgres.DSN != "${PRECOG_VIEWTEST_DSN}" || s.Sinks.Redis.DB != 0 {
		t.Fatalf("view: name %q schedule %q dsn %q db %d", s.Name, s.Schedule, s.Sinks.Postgres.DSN, s.Sinks.Redis.DB)
	}
	t.Setenv("PRECOG_VIEWTEST_DSN", "postgres://app:set-secret@db/x")
	t.Setenv("PRECOG_VIEWTEST_PW", "set-secret")
	t.Setenv("PRECOG_VIEWTEST_DB", "3")
	s, err = LoadForView(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sinks.Postgres.DSN != "${PRECOG_VIEWTEST_DSN}" || s.Sinks.Redis.Password != "${PRECOG_VIEWTEST_PW}" || strings.Contains(s.Sinks.Redis.Addr, "set-secret") || s.Sinks.Redis.DB != 3 {
		t.Fatalf("a view expanded a connection field: %+v %+v", s.Sinks.Postgres, s.Sinks.Redis)
	}
	if full, err := Load(p, nil); err != nil || full.Sinks.Postgres.DSN != "postgres://app:set-secret@db/x" {
		t.Fatalf("Load with the secrets: %v", err)
	}
}
