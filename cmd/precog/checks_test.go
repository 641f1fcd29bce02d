package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHeldRunCLI: a run whose checks fail is held (exit 1, nothing
// published); status --json shows state held and its checks; diff prints
// the report; publish --accept publishes it and records who; cancel
// discards another held run.
func TestHeldRunCLI(t *testing.T) {
	dir := workdir(t)
	body := strings.Replace(rankerSpec, `parquet: { path: "out/scores/date={{.date}}" }`, `parquet: { path: "out/scores" }`, 1) +
		"checks:\n  rows: { min_ratio: 1.01 }\n  outputs:\n    score: { max_psi: 0.2, range: [0, 1] }\n"
	spec := writeSpec(t, dir, "job.yaml", body)
	if r := precog(t, dir, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	success := filepath.Join(dir, "out", "scores", "_SUCCESS")
	first, err := os.ReadFile(success)
	if err != nil {
		t.Fatal(err)
	}
	r := precog(t, dir, "run", spec, "--param", "date=2026-11-02")
	if r.code != 1 || !strings.Contains(r.stderr, "held by its checks") || !strings.Contains(r.stderr, "rows.min_ratio") {
		t.Fatalf("second run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if now, _ := os.ReadFile(success); string(now) != string(first) {
		t.Fatalf("a held run changed the published output")
	}
	runs := precog(t, dir, "runs", "--json")
	var list []struct{ ID, State string }
	if err := json.Unmarshal([]byte(runs.stdout), &list); err != nil || len(list) != 2 {
		t.Fatalf("runs --json: %v\n%s", err, runs.stdout)
	}
	held := list[0].ID
	st := precog(t, dir, "status", held, "--json")
	var status struct {
		State  string `json:"state"`
		Checks []struct {
			Name      string  `json:"name"`
			Value     float64 `json:"value"`
			Threshold any     `json:"threshold"`
			Passed    bool    `json:"passed"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &status); err != nil {
		t.Fatalf("status --json: %v\n%s", err, st.stdout)
	}
	if status.State != "held" || len(status.Checks) != 3 || status.Checks[0].Name != "rows.min_ratio" || status.Checks[0].Passed || status.Checks[0].Value != 1 {
		t.Fatalf("status of a held run: %+v", status)
	}
	// A report with a failed check exits 1 (issue 31.17: diff exited 0
	// while printing "checks failed").
	if d := precog(t, dir, "diff", held); d.code != 1 || !strings.Contains(d.stdout, "rows.min_ratio") || !strings.Contains(d.stdout, "FAILED") || !strings.Contains(d.stdout, "checks failed") {
		t.Fatalf("diff: exit %d\n%s\n%s", d.code, d.stdout, d.stderr)
	}
	if d := precog(t, dir, "diff", held, "--against", list[1].ID, "--json"); d.code != 1 || !strings.Contains(d.stdout, `"against_run":"`+list[1].ID+`"`) || !strings.Contains(d.stdout, `"passed":false`) {
		t.Fatalf("diff --against: exit %d\n%s\n%s", d.code, d.stdout, d.stderr)
	}
	if p := precog(t, dir, "publish", held, "--accept"); p.code != 2 {
		t.Fatalf("publish without --reason: exit %d", p.code)
	}
	p := precog(t, dir, "publish", held, "--accept", "--reason", "second day is expected", "--by", "alice")
	if p.code != 0 || !strings.Contains(p.stdout, "succeeded") {
		t.Fatalf("publish --accept: exit %d\n%s\n%s", p.code, p.stdout, p.stderr)
	}
	if now, _ := os.ReadFile(success); string(now) == string(first) {
		t.Fatalf("publish --accept did not publish")
	}
	// Another held run, discarded by cancel.
	if r := precog(t, dir, "run", spec, "--param", "date=2026-11-01"); r.code != 1 {
		t.Fatalf("third run: exit %d\n%s", r.code, r.stderr)
	}
	runs = precog(t, dir, "runs", "--json")
	_ = json.Unmarshal([]byte(runs.stdout), &list)
	if c := precog(t, dir, "cancel", list[0].ID); c.code != 0 || !strings.Contains(c.stdout, "cancelled") {
		t.Fatalf("cancel of a held run: exit %d\n%s\n%s", c.code, c.stdout, c.stderr)
	}
	// Retrying the cancelled run says how to run it again (issue 31.17:
	// no hint).
	if r := precog(t, dir, "retry", list[0].ID); r.code != 2 || !strings.Contains(r.stderr, "start a new run with:") || !strings.Contains(r.stderr, "run "+spec+" --param date=2026-11-01") {
		t.Fatalf("retry of a cancelled run: exit %d\n%s", r.code, r.stderr)
	}
}
