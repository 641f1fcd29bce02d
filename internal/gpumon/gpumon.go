// Package gpumon measures how busy each GPU is, through NVML
// (github.com/NVIDIA/go-nvml), which it loads with dlopen on first use: a
// machine without NVIDIA's driver has no libnvidia-ml.so.1, and there
// Default reports the monitor unavailable instead of failing. While some
// caller watches a device, a goroutine samples the device's utilization
// every Interval and integrates it into busy seconds.
package gpumon

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Interval is how often a watched device's utilization is sampled. NVML
// reports the share of its own last sample period (1/6 s to 1 s, by
// device) in which a kernel ran.
const Interval = 250 * time.Millisecond

// Reading is a device's cumulative time sampled and, of it, busy, both in
// seconds since the monitor started watching it.
type Reading struct {
	Sampled, Busy float64
}

// Monitor integrates the utilization of the GPUs its callers watch.
type Monitor struct {
	// util reads a device's utilization now, as a fraction in [0, 1].
	util     func(dev int) (float64, error)
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	devs map[int]*device
}

type device struct {
	watchers int
	stop     chan struct{}
	last     time.Time // of the previous sample
	r        Reading
}

// New returns a monitor reading utilization with util every interval.
func New(util func(dev int) (float64, error), interval time.Duration) *Monitor {
	return &Monitor{util: util, interval: interval, now: time.Now, devs: map[int]*device{}}
}

var (
	defaultOnce sync.Once
	defaultMon  *Monitor
	defaultErr  error
)

// Default is the process's NVML monitor, or why there is none (no NVIDIA
// driver, NVML refused to start). NVML is loaded on the first call only.
func Default() (*Monitor, error) {
	defaultOnce.Do(func() {
		if ret := nvml.Init(); ret != nvml.SUCCESS {
			defaultErr = fmt.Errorf("nvml: %s", nvml.ErrorString(ret))
			if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
				defaultErr = errors.New("nvml: libnvidia-ml.so.1 not found (no NVIDIA driver here)")
			}
			return
		}
		defaultMon = New(nvmlUtilization, Interval)
	})
	return defaultMon, defaultErr
}

// nvmlUtilization reads device dev's GPU utilization through NVML.
func nvmlUtilization(dev int) (float64, error) {
	d, ret := nvml.DeviceGetHandleByIndex(dev)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("nvml: device %d: %s", dev, nvml.ErrorString(ret))
	}
	u, ret := d.GetUtilizationRates()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("nvml: device %d utilization: %s", dev, nvml.ErrorString(ret))
	}
	return float64(u.Gpu) / 100, nil
}

// Watch starts sampling dev (if no one else watches it) until the returned
// stop is called; stop is idempotent.
func (m *Monitor) Watch(dev int) (stop func()) {
	m.mu.Lock()
	d := m.devs[dev]
	if d == nil {
		d = &device{}
		m.devs[dev] = d
	}
	d.watchers++
	if d.watchers == 1 {
		d.stop = make(chan struct{})
		d.last = m.now()
		go m.loop(dev, d.stop)
	}
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			d.watchers--
			if d.watchers == 0 {
				m.sampleLocked(dev, d)
				close(d.stop)
			}
		})
	}
}

func (m *Monitor) loop(dev int, stop <-chan struct{}) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			m.Sample(dev)
		}
	}
}

// Sample takes one sample of dev now (the loop's tick; tests call it).
func (m *Monitor) Sample(dev int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := m.devs[dev]; d != nil && d.watchers > 0 {
		m.sampleLocked(dev, d)
	}
}

// sampleLocked adds the time since dev's last sample, busy in the share
// the device reports now. A failed read leaves the interval unsampled.
func (m *Monitor) sampleLocked(dev int, d *device) {
	now := m.now()
	dt := now.Sub(d.last).Seconds()
	d.last = now
	if dt <= 0 {
		return
	}
	u, err := m.util(dev)
	if err != nil {
		return
	}
	d.r.Sampled += dt
	d.r.Busy += dt * min(1, max(0, u))
}

// Reading reports dev's cumulative sampled and busy seconds, after taking
// a sample now when it is watched.
func (m *Monitor) Reading(dev int) Reading {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.devs[dev]
	if d == nil {
		return Reading{}
	}
	if d.watchers > 0 {
		m.sampleLocked(dev, d)
	}
	return d.r
}
