package runner

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/precog-ml/precog/internal/gpumon"
	"github.com/precog-ml/precog/jobs"
)

// fakeBusy is a GPU monitor whose readings the test sets.
type fakeBusy struct {
	r       map[int]gpumon.Reading
	watched map[int]int
}

func (f *fakeBusy) Watch(dev int) func() {
	f.watched[dev]++
	return func() { f.watched[dev]-- }
}
func (f *fakeBusy) Reading(dev int) gpumon.Reading { return f.r[dev] }

// meterAt is a cost meter on a clock, CPU counter and GPU monitor the test
// moves.
type meterAt struct {
	m    *costMeter
	t    time.Time
	cpu  time.Duration
	busy *fakeBusy
}

func newMeterAt(withGPU bool) *meterAt {
	x := &meterAt{t: time.Unix(1000, 0), busy: &fakeBusy{r: map[int]gpumon.Reading{}, watched: map[int]int{}}}
	x.m = &costMeter{now: func() time.Time { return x.t }, cpu: func() time.Duration { return x.cpu },
		gpu: func() (busyMeter, error) {
			if !withGPU {
				return nil, errors.New("no NVML here")
			}
			return x.busy, nil
		}}
	return x
}

// step moves the clock by wall seconds and the CPU counter by cpu seconds.
func (x *meterAt) step(wall, cpu float64) {
	x.t = x.t.Add(time.Duration(wall * float64(time.Second)))
	x.cpu += time.Duration(cpu * float64(time.Second))
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestCostMeterSplitsCPUAmongAttempts: the process's CPU time is split
// evenly among the attempts in flight in each interval, and the shares add
// up to what the process used while attempts ran.
func TestCostMeterSplitsCPUAmongAttempts(t *testing.T) {
	x := newMeterAt(false)
	x.step(5, 3) // before any attempt: nobody's
	a := x.m.begin("cpu")
	x.step(1, 2) // a alone: 2
	b := x.m.begin("cpu")
	x.step(1, 4) // a and b: 2 each
	ca := x.m.end(a, 10)
	x.step(1, 1) // b alone: 1
	cb := x.m.end(b, 20)
	if !approx(ca.CPUSeconds, 4) || !approx(cb.CPUSeconds, 3) {
		t.Fatalf("cpu seconds a %v, b %v; want 4 and 3", ca.CPUSeconds, cb.CPUSeconds)
	}
	if ca.DeviceSeconds != 0 || ca.GPURows != 0 || cb.GPURows != 0 {
		t.Fatalf("CPU attempts got GPU cost: %+v %+v", ca, cb)
	}
}

// TestCostMeterGPU: a GPU's wall time and busy time go to the attempts on
// it, split among those sharing it; CPU attempts get none of it; rows
// written on a GPU count as GPU rows.
func TestCostMeterGPU(t *testing.T) {
	busy0 := testutil.ToFloat64(costGPUBusy.WithLabelValues("cuda:0"))
	rows0 := testutil.ToFloat64(costGPURows.WithLabelValues("cuda:0"))
	x := newMeterAt(true)
	g1 := x.m.begin("cuda:0")
	if x.busy.watched[0] != 1 {
		t.Fatal("cuda:0 not watched")
	}
	c := x.m.begin("cpu")
	x.busy.r[0] = gpumon.Reading{Sampled: 2, Busy: 1}
	x.step(2, 4) // g1 alone on cuda:0 (2 s, 1 s busy); cpu 4 over g1 and c
	g2 := x.m.begin("cuda:0")
	x.busy.r[0] = gpumon.Reading{Sampled: 6, Busy: 4}
	x.step(4, 0) // g1 and g2 share cuda:0: 2 s each, 1.5 busy each
	c1 := x.m.end(g1, 100)
	cc := x.m.end(c, 5)
	c2 := x.m.end(g2, 300)
	want1 := jobs.Cost{CPUSeconds: 2, DeviceSeconds: 4, GPUSampledSeconds: 4, GPUBusySeconds: 2.5, GPURows: 100}
	want2 := jobs.Cost{CPUSeconds: 0, DeviceSeconds: 2, GPUSampledSeconds: 2, GPUBusySeconds: 1.5, GPURows: 300}
	for _, tc := range []struct{ got, want jobs.Cost }{{c1, want1}, {c2, want2}} {
		if !approx(tc.got.CPUSeconds, tc.want.CPUSeconds) || !approx(tc.got.DeviceSeconds, tc.want.DeviceSeconds) ||
			!approx(tc.got.GPUSampledSeconds, tc.want.GPUSampledSeconds) || !approx(tc.got.GPUBusySeconds, tc.want.GPUBusySeconds) || tc.got.GPURows != tc.want.GPURows {
			t.Errorf("cost %+v, want %+v", tc.got, tc.want)
		}
	}
	if !approx(cc.CPUSeconds, 2) || cc.DeviceSeconds != 0 {
		t.Errorf("CPU attempt cost %+v", cc)
	}
	if x.busy.watched[0] != 0 {
		t.Errorf("cuda:0 still watched by %d", x.busy.watched[0])
	}
	// /metrics: the same costs, by device.
	if d := testutil.ToFloat64(costGPUBusy.WithLabelValues("cuda:0")) - busy0; !approx(d, 4) {
		t.Errorf("precog_gpu_busy_seconds_total{device=cuda:0} grew by %v, want 4", d)
	}
	if d := testutil.ToFloat64(costGPURows.WithLabelValues("cuda:0")) - rows0; d != 400 {
		t.Errorf("precog_gpu_rows_total{device=cuda:0} grew by %v, want 400", d)
	}
}

// TestCostMeterWithoutNVML: without NVML the device-seconds and GPU rows
// are still recorded, busy time is not.
func TestCostMeterWithoutNVML(t *testing.T) {
	x := newMeterAt(false)
	g := x.m.begin("cuda:1")
	x.step(3, 1)
	c := x.m.end(g, 7)
	if !approx(c.DeviceSeconds, 3) || c.GPUSampledSeconds != 0 || c.GPURows != 7 {
		t.Fatalf("cost %+v", c)
	}
	if _, ok := c.GPUBusy(); ok {
		t.Fatal("busy known without NVML")
	}
}
