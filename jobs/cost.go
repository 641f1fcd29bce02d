package jobs

// Cost is what a shard's committed attempt used, stored with its commit in
// the ledger; a run's cost is its committed shards' costs summed (SumCost).
// Zero fields are left out of JSON, so a shard written before costs were
// recorded reads as a zero Cost.
type Cost struct {
	// CPUSeconds is the process CPU time (user and system) attributed to
	// the shard: the process's CPU time while shards ran, each interval
	// split evenly among the shards then in flight.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// DeviceSeconds is the wall time a GPU (device cuda:N) worked on the
	// shard, each interval split among the shards then sharing that GPU;
	// 0 on the CPU.
	DeviceSeconds float64 `json:"device_seconds,omitempty"`
	// GPUSampledSeconds is the part of DeviceSeconds for which NVML
	// reported the GPU's utilization, GPUBusySeconds the busy time within
	// it; both 0 where NVML is absent.
	GPUSampledSeconds float64 `json:"gpu_sampled_seconds,omitempty"`
	GPUBusySeconds    float64 `json:"gpu_busy_seconds,omitempty"`
	// GPURows are the rows the shard wrote when it ran on a GPU.
	GPURows int64 `json:"gpu_rows,omitempty"`
}

// Add returns c + o.
func (c Cost) Add(o Cost) Cost {
	return Cost{
		CPUSeconds:        c.CPUSeconds + o.CPUSeconds,
		DeviceSeconds:     c.DeviceSeconds + o.DeviceSeconds,
		GPUSampledSeconds: c.GPUSampledSeconds + o.GPUSampledSeconds,
		GPUBusySeconds:    c.GPUBusySeconds + o.GPUBusySeconds,
		GPURows:           c.GPURows + o.GPURows,
	}
}

// IsZero reports whether nothing was recorded.
func (c Cost) IsZero() bool { return c == Cost{} }

// GPUBusy is the fraction of sampled device time the GPU was busy, and
// false when NVML sampled none.
func (c Cost) GPUBusy() (float64, bool) {
	if c.GPUSampledSeconds <= 0 {
		return 0, false
	}
	return min(1, c.GPUBusySeconds/c.GPUSampledSeconds), true
}

// RowsPerGPUSecond is GPURows over DeviceSeconds (0 without GPU time).
func (c Cost) RowsPerGPUSecond() float64 {
	if c.DeviceSeconds <= 0 {
		return 0
	}
	return float64(c.GPURows) / c.DeviceSeconds
}

// SumCost is a run's cost: the sum of its committed shards' costs (a shard
// reopened or still running counts nothing).
func SumCost(shards []Shard) Cost {
	var c Cost
	for _, s := range shards {
		if s.State == ShardCommitted {
			c = c.Add(s.Cost)
		}
	}
	return c
}
