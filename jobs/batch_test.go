package jobs

import (
	"strings"
	"testing"
)

// TestBatchRowsByDevice: a spec that leaves model.batch_size out gets the
// device's batch (1024 rows on a CPU, 16384 on a GPU, fewer where one
// batch's inputs would pass GPUBatchBytes); a spec that sets it keeps it on
// every device, and the device a worker runs it on (openRunFor sets
// Model.Device) decides, not the spec's. The spec's hash does not change
// with the device's choice (a run resumed by another version).
func TestBatchRowsByDevice(t *testing.T) {
	auto, err := Parse([]byte(strings.Replace(baseSpec, "  batch_size: 256\n", "", 1)), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Parse([]byte(baseSpec), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	explicit := strings.Replace(baseSpec, "  batch_size: 256\n", "  batch_size: 1024\n", 1)
	same, err := Parse([]byte(explicit), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auto.Hash() != same.Hash() {
		t.Errorf("leaving batch_size out changed the spec's hash against batch_size: 1024")
	}
	onGPU := func(m ModelSpec) ModelSpec { m.Device = "cuda:1"; return m }
	cases := []struct {
		name     string
		m        ModelSpec
		rowBytes int
		want     int
	}{
		{"left out, cpu", auto.Model, 64, DefaultBatchSize},
		{"left out, gpu", onGPU(auto.Model), 64, DefaultGPUBatchSize},
		{"left out, gpu, row bytes unknown", onGPU(auto.Model), 0, DefaultGPUBatchSize},
		{"left out, gpu, 1 MiB rows", onGPU(auto.Model), 1 << 20, GPUBatchBytes >> 20},
		{"left out, gpu, rows wider than the budget", onGPU(auto.Model), GPUBatchBytes + 1, 1},
		{"set, cpu", set.Model, 64, 256},
		{"set, gpu", onGPU(set.Model), 64, 256},
		{"set to the cpu default, gpu", onGPU(same.Model), 64, DefaultBatchSize},
		{"built in code without one, gpu", ModelSpec{Device: "cuda:0"}, 64, DefaultGPUBatchSize},
		{"built in code with one, gpu", ModelSpec{Device: "cuda:0", BatchSize: 512}, 64, 512},
	}
	for _, c := range cases {
		if got := c.m.BatchRows(c.rowBytes); got != c.want {
			t.Errorf("%s: BatchRows(%d) = %d, want %d", c.name, c.rowBytes, got, c.want)
		}
	}
}
