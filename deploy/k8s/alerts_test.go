package k8s_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// writeRules writes the rendered PrometheusRule's groups as a Prometheus
// rule file (what the operator hands Prometheus) and returns its directory.
func writeRules(t *testing.T) (dir string, rules []monv1.Rule) {
	t.Helper()
	prs := ofKind[monv1.PrometheusRule](render(t, "gpu"))
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(prs))
	}
	data, err := yaml.Marshal(map[string]any{"groups": prs[0].Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, g := range prs[0].Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	return dir, rules
}

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := tool(t, "promtool")
	dir, rules := writeRules(t)
	if out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	test, err := os.ReadFile("alerts-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts-test.yaml"), test, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts-test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// The staleness and failed-run alerts are what the unit tests must cover.
	for _, a := range []string{"PrecogJobStale", "PrecogRunFailed"} {
		if !strings.Contains(string(test), "alertname: "+a) {
			t.Errorf("alerts-test.yaml has no case for %s", a)
		}
	}
	want := []string{"PrecogJobStale", "PrecogRunFailed", "PrecogShardsPendingWithoutWorkers",
		"PrecogWorkerPoolNotReady", "PrecogLookupLatencyHigh", "PrecogLookup5xxRate"}
	have := map[string]bool{}
	for _, r := range rules {
		have[r.Alert] = true
	}
	for _, a := range want {
		if !have[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// schedulerMetrics are the scheduler's series the alerts use; the scheduler
// is not merged yet, so they are checked against this list, not its source.
var schedulerMetrics = map[string]bool{
	"precog_job_stale": true, "precog_job_last_success_timestamp_seconds": true, "precog_runs_finished_total": true,
}

var metricName = regexp.MustCompile(`\bprecog_[a-z0-9_]+`)

// Every precog_* series an alert uses is one precog exports: declared in
// lookup/ or runner/ (histograms by their base name), or the scheduler's.
func TestAlertMetricsExist(t *testing.T) {
	_, rules := writeRules(t)
	root := repoRoot(t)
	var src strings.Builder
	for _, f := range []string{"lookup/metrics.go", "runner/stats.go"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, r := range rules {
		for _, m := range metricName.FindAllString(r.Expr.String(), -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
			if !schedulerMetrics[base] && !strings.Contains(src.String(), `"`+base+`"`) {
				t.Errorf("alert %s uses %s, which precog does not export", r.Alert, m)
			}
		}
	}
}
