package runner

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/precog-ml/precog/internal/gpumon"
	"github.com/precog-ml/precog/jobs"
)

// busyMeter is what the cost meter needs of a GPU monitor (gpumon).
type busyMeter interface {
	Watch(dev int) (stop func())
	Reading(dev int) gpumon.Reading
}

// costMeter attributes the process's CPU time, and each GPU's wall and
// busy time, to the shard attempts in flight: at every attempt's start
// and end it splits what accrued since the previous such event evenly
// among the attempts then running (the CPU time among all of them, a GPU's
// time among those on that GPU). Between two events the set of attempts
// is fixed, so each gets its share of every interval it was part of.
type costMeter struct {
	now func() time.Time
	cpu func() time.Duration
	// gpu opens the GPU monitor on the first attempt on a GPU; nil, err
	// where there is none (busy time is then not recorded).
	gpu func() (busyMeter, error)

	mu       sync.Mutex
	last     time.Time
	lastCPU  time.Duration
	open     map[*costToken]struct{}
	gpus     busyMeter
	gpusErr  error
	gpusOpen bool
	lastBusy map[int]gpumon.Reading
	onDev    map[int]int // attempts in flight per GPU
}

// costToken is one attempt's running cost.
type costToken struct {
	dev   int // -1 on the CPU
	cost  jobs.Cost
	unwat func()
}

func newCostMeter() *costMeter {
	return &costMeter{now: time.Now, cpu: processCPU, gpu: func() (busyMeter, error) {
		m, err := gpumon.Default()
		if err != nil {
			return nil, err
		}
		return m, nil
	}}
}

// costs is the process's meter: its CPU time and GPUs are shared by every
// attempt it runs, whichever run or worker loop they belong to.
var costs = newCostMeter()

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cudaIndex reads "cuda:N" as N; -1 for cpu (or anything else).
func cudaIndex(device string) int {
	if n, ok := strings.CutPrefix(device, "cuda:"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 {
			return i
		}
	}
	return -1
}

// begin starts metering an attempt on device ("cpu", "cuda:N").
func (m *costMeter) begin(device string) *costToken {
	t := &costToken{dev: cudaIndex(device)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open == nil {
		m.open, m.lastBusy, m.onDev = map[*costToken]struct{}{}, map[int]gpumon.Reading{}, map[int]int{}
		m.last, m.lastCPU = m.now(), m.cpu()
	}
	m.advanceLocked()
	if t.dev >= 0 {
		if !m.gpusOpen {
			m.gpusOpen = true
			m.gpus, m.gpusErr = m.gpu()
			if m.gpusErr != nil {
				slog.Debug("GPU busy time not recorded", "err", m.gpusErr)
			}
		}
		if m.gpus != nil {
			t.unwat = m.gpus.Watch(t.dev)
			m.lastBusy[t.dev] = m.gpus.Reading(t.dev)
		}
		m.onDev[t.dev]++
	}
	m.open[t] = struct{}{}
	return t
}

// end stops metering t and returns its cost; rowsOut are the rows the
// attempt wrote (counted as GPU rows on a GPU). The cost also goes to the
// process's metrics.
func (m *costMeter) end(t *costToken, rowsOut int64) jobs.Cost {
	m.mu.Lock()
	m.advanceLocked()
	delete(m.open, t)
	if t.dev >= 0 {
		m.onDev[t.dev]--
		t.cost.GPURows = rowsOut
	}
	m.mu.Unlock()
	if t.unwat != nil {
		t.unwat()
	}
	observeCost(t.dev, t.cost)
	return t.cost
}

// advanceLocked splits what accrued since the last event among the open
// attempts.
func (m *costMeter) advanceLocked() {
	now, cpu := m.now(), m.cpu()
	dt := now.Sub(m.last).Seconds()
	dcpu := (cpu - m.lastCPU).Seconds()
	m.last, m.lastCPU = now, cpu
	if len(m.open) == 0 {
		return
	}
	busy := map[int][2]float64{} // per GPU: sampled and busy seconds accrued
	if m.gpus != nil {
		for dev, n := range m.onDev {
			if n == 0 {
				continue
			}
			r := m.gpus.Reading(dev)
			prev := m.lastBusy[dev]
			busy[dev] = [2]float64{r.Sampled - prev.Sampled, r.Busy - prev.Busy}
			m.lastBusy[dev] = r
		}
	}
	share := 1 / float64(len(m.open))
	for t := range m.open {
		t.cost.CPUSeconds += max(0, dcpu) * share
		if t.dev < 0 {
			continue
		}
		k := float64(m.onDev[t.dev])
		t.cost.DeviceSeconds += max(0, dt) / k
		if b, ok := busy[t.dev]; ok {
			t.cost.GPUSampledSeconds += max(0, b[0]) / k
			t.cost.GPUBusySeconds += max(0, b[1]) / k
		}
	}
}

// Prometheus counters of what shard attempts used, by device ("cpu",
// "cuda:N"): GPU busy % is rate(busy)/rate(sampled), rows per GPU-second
// rate(gpu_rows)/rate(gpu_seconds).
var (
	costCPUSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_shard_cpu_seconds_total",
		Help: "Process CPU time attributed to shard attempts (split evenly among the attempts in flight), by the attempts' device.",
	}, []string{"device"})
	costGPUSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_gpu_seconds_total",
		Help: "Device-seconds of GPUs spent on shard attempts (wall time split among the attempts sharing a GPU).",
	}, []string{"device"})
	costGPUSampled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_gpu_sampled_seconds_total",
		Help: "Of precog_gpu_seconds_total, the time NVML reported utilization for (0 without NVML).",
	}, []string{"device"})
	costGPUBusy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_gpu_busy_seconds_total",
		Help: "Of the sampled GPU time, the time a kernel ran (NVML utilization): busy % = rate(busy) / rate(sampled).",
	}, []string{"device"})
	costGPURows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_gpu_rows_total",
		Help: "Rows written by shard attempts on a GPU: rows per GPU-second = rate(this) / rate(precog_gpu_seconds_total).",
	}, []string{"device"})
)

func costMetrics() []prometheus.Collector {
	return []prometheus.Collector{costCPUSeconds, costGPUSeconds, costGPUSampled, costGPUBusy, costGPURows}
}

func observeCost(dev int, c jobs.Cost) {
	name := jobs.DeviceCPU
	if dev >= 0 {
		name = "cuda:" + strconv.Itoa(dev)
	}
	costCPUSeconds.WithLabelValues(name).Add(c.CPUSeconds)
	if dev < 0 {
		return
	}
	costGPUSeconds.WithLabelValues(name).Add(c.DeviceSeconds)
	costGPUSampled.WithLabelValues(name).Add(c.GPUSampledSeconds)
	costGPUBusy.WithLabelValues(name).Add(c.GPUBusySeconds)
	costGPURows.WithLabelValues(name).Add(float64(c.GPURows))
}
