package runview

import (
	"fmt"
	"math"
	"strings"

	"github.com/precog-ml/precog/jobs"
)

// Cost is what a run's committed shards used, as `status --json` and the
// dashboard show it: CPU seconds on any device; on a GPU, device-seconds,
// the share of them the GPU was busy (null where NVML was unavailable) and
// rows per GPU-second.
type Cost struct {
	CPUSeconds    float64 `json:"cpu_seconds"`
	DeviceSeconds float64 `json:"device_seconds"`
	// GPUBusyPct is the GPU's busy time over the sampled device time, in
	// percent; absent (null) when no GPU time was sampled.
	GPUBusyPct *float64 `json:"gpu_busy_pct"`
	// RowsPerGPUSecond is rows written on a GPU over DeviceSeconds.
	RowsPerGPUSecond float64 `json:"rows_per_gpu_s"`
}

// costOf sums the committed shards' costs; nil when none recorded any.
func costOf(shards []jobs.Shard) *Cost {
	c := jobs.SumCost(shards)
	if c.IsZero() {
		return nil
	}
	v := &Cost{CPUSeconds: round3(c.CPUSeconds), DeviceSeconds: round3(c.DeviceSeconds), RowsPerGPUSecond: math.Round(c.RowsPerGPUSecond())}
	if busy, ok := c.GPUBusy(); ok {
		pct := math.Round(busy*1000) / 10
		v.GPUBusyPct = &pct
	}
	return v
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Text is the cost on one line: "CPU 12.3 s" and, when a GPU ran shards,
// "; GPU 4.5 device-s, 87.0% busy, 1.2M rows per GPU-s".
func (c *Cost) Text() string {
	if c == nil {
		return "-"
	}
	parts := []string{fmt.Sprintf("CPU %.1f s", c.CPUSeconds)}
	if c.DeviceSeconds > 0 {
		g := fmt.Sprintf("GPU %.1f device-s", c.DeviceSeconds)
		if c.GPUBusyPct != nil {
			g += fmt.Sprintf(", %.1f%% busy", *c.GPUBusyPct)
		} else {
			g += ", busy unknown (no NVML)"
		}
		g += fmt.Sprintf(", %s rows per GPU-s", Human(int64(c.RowsPerGPUSecond)))
		parts = append(parts, g)
	}
	return strings.Join(parts, "; ")
}
