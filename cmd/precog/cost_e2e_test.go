package main

import (
	"encoding/json"
	"regexp"
	"testing"
)

// TestRunRecordsCPUSeconds: a local run records the CPU time its shards
// used with their commits, and status shows the run's sum (JSON and text);
// on the CPU there is no GPU cost.
func TestRunRecordsCPUSeconds(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	if r := precog(t, dir, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	runs := precog(t, dir, "runs", "--json")
	var list []struct{ ID string }
	if err := json.Unmarshal([]byte(runs.stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("runs --json: %v\n%s", err, runs.stdout)
	}
	st := precog(t, dir, "status", list[0].ID, "--json")
	var v struct {
		Cost *struct {
			CPUSeconds    float64  `json:"cpu_seconds"`
			DeviceSeconds float64  `json:"device_seconds"`
			GPUBusyPct    *float64 `json:"gpu_busy_pct"`
		} `json:"cost"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &v); err != nil {
		t.Fatalf("status --json: %v\n%s", err, st.stdout)
	}
	if v.Cost == nil || v.Cost.CPUSeconds <= 0 || v.Cost.DeviceSeconds != 0 || v.Cost.GPUBusyPct != nil {
		t.Fatalf("cost of a CPU run: %+v\n%s", v.Cost, st.stdout)
	}
	if text := precog(t, dir, "status", list[0].ID); !regexp.MustCompile(`(?m)^cost +CPU \d+\.\d s$`).MatchString(text.stdout) {
		t.Errorf("status lacks the cost line:\n%s", text.stdout)
	}
}
