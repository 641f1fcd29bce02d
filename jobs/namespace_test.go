package jobs

import (
	"strings"
	"testing"
)

// TestRedisNamespaceTemplate: a Redis namespace may use {{.param}} like
// paths, and its charset is checked once rendered, so a namespace per date
// is accepted and a value that renders outside the charset is refused.
func TestRedisNamespaceTemplate(t *testing.T) {
	spec := baseSpec + "  redis: { addr: x, namespace: \"d{{.date}}\", publish: in_place }\n"
	s, err := Parse([]byte(spec), "job.yaml", map[string]string{"date": "2026-11-01"}, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := s.Sinks.Redis.Namespace; got != "d2026-11-01" {
		t.Errorf("namespace = %q, want d2026-11-01", got)
	}
	_, err = Parse([]byte(spec), "job.yaml", map[string]string{"date": "2026:11"}, func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), `sinks.redis.namespace: "d2026:11" (rendered from "d{{.date}}") must be 1 to 128 of [A-Za-z0-9_.-]`) {
		t.Errorf("Parse with a value outside the charset = %v, want the rendered namespace refused", err)
	}
}
