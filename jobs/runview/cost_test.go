package runview

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// TestRunCost: a run's cost is its committed shards' (a running shard's
// does not count), shown in the JSON view and on the detail view's cost
// line; a run whose shards recorded none has no cost key.
func TestRunCost(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	r := jobs.Run{ID: "r1", Job: "j", State: jobs.RunRunning, CreatedAt: now.Add(-time.Minute)}
	shards := []jobs.Shard{
		{Index: 0, State: jobs.ShardCommitted, Cost: jobs.Cost{CPUSeconds: 1.25, DeviceSeconds: 2, GPUSampledSeconds: 2, GPUBusySeconds: 1.5, GPURows: 3_000_000}},
		{Index: 1, State: jobs.ShardCommitted, Cost: jobs.Cost{CPUSeconds: 0.75, DeviceSeconds: 1, GPUSampledSeconds: 1, GPUBusySeconds: 0.3, GPURows: 1_500_000}},
		{Index: 2, State: jobs.ShardRunning, Cost: jobs.Cost{CPUSeconds: 100}},
	}
	v := FromAt(r, shards, now)
	if v.Cost == nil || v.Cost.CPUSeconds != 2 || v.Cost.DeviceSeconds != 3 || v.Cost.RowsPerGPUSecond != 1_500_000 ||
		v.Cost.GPUBusyPct == nil || *v.Cost.GPUBusyPct != 60 {
		t.Fatalf("cost %+v", v.Cost)
	}
	b, _ := json.Marshal(v)
	for _, want := range []string{`"cost":{"cpu_seconds":2,"device_seconds":3,"gpu_busy_pct":60,"rows_per_gpu_s":1500000}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var out bytes.Buffer
	if err := (Detail{Run: v, Shards: shards}).Write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cost      CPU 2.0 s; GPU 3.0 device-s, 60.0% busy, 1.5M rows per GPU-s") {
		t.Errorf("detail view:\n%s", out.String())
	}

	// A CPU run: CPU seconds only; without NVML, busy is null.
	cpu := FromAt(r, []jobs.Shard{{State: jobs.ShardCommitted, Cost: jobs.Cost{CPUSeconds: 4}}}, now)
	if cpu.Cost.Text() != "CPU 4.0 s" {
		t.Errorf("CPU run cost %q", cpu.Cost.Text())
	}
	noNVML := FromAt(r, []jobs.Shard{{State: jobs.ShardCommitted, Cost: jobs.Cost{DeviceSeconds: 1, GPURows: 10}}}, now)
	if noNVML.Cost.GPUBusyPct != nil || !strings.Contains(noNVML.Cost.Text(), "busy unknown") {
		t.Errorf("no NVML: %+v %q", noNVML.Cost, noNVML.Cost.Text())
	}
	b, _ = json.Marshal(noNVML.Cost)
	if !strings.Contains(string(b), `"gpu_busy_pct":null`) {
		t.Errorf("no NVML JSON: %s", b)
	}

	old := FromAt(r, []jobs.Shard{{State: jobs.ShardCommitted}}, now)
	b, _ = json.Marshal(old)
	if old.Cost != nil || strings.Contains(string(b), `"cost"`) {
		t.Errorf("a run without recorded costs shows one: %s", b)
	}
}
