package gpumon

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestMonitorIntegratesUtilization: busy seconds are each sampled
// interval times the utilization read at its end; a failed read leaves
// its interval unsampled; nothing accrues while no one watches.
func TestMonitorIntegratesUtilization(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	util := 0.5
	var fail bool
	var mu sync.Mutex
	m := New(func(dev int) (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return 0, errors.New("gone")
		}
		return util, nil
	}, time.Hour) // the loop never ticks; the test samples
	m.now = clock.now

	stop := m.Watch(0)
	clock.add(2 * time.Second)
	m.Sample(0) // 2 s at 50%
	mu.Lock()
	util = 1
	mu.Unlock()
	clock.add(time.Second)
	if r := m.Reading(0); !near(r.Sampled, 3) || !near(r.Busy, 2) { // + 1 s at 100%
		t.Fatalf("reading %+v, want 3 s sampled, 2 s busy", r)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	clock.add(time.Second)
	m.Sample(0)
	if r := m.Reading(0); !near(r.Sampled, 3) {
		t.Fatalf("a failed read was counted: %+v", r)
	}
	stop()
	stop() // idempotent
	mu.Lock()
	fail = false
	mu.Unlock()
	clock.add(time.Minute)
	m.Sample(0)
	if r := m.Reading(0); !near(r.Sampled, 3) {
		t.Fatalf("sampled while nobody watched: %+v", r)
	}
	if r := m.Reading(7); r != (Reading{}) {
		t.Fatalf("a device never watched reads %+v", r)
	}
}

// TestDefaultWithoutDriver: on a machine without NVIDIA's driver (this
// one, unless it has a GPU) Default says so instead of failing.
func TestDefaultWithoutDriver(t *testing.T) {
	m, err := Default()
	if err == nil {
		if m == nil {
			t.Fatal("no monitor and no error")
		}
		t.Skip("NVML is available here")
	}
	if m != nil || !strings.Contains(err.Error(), "nvml") {
		t.Fatalf("Default() = %v, %v", m, err)
	}
	t.Log(err)
}
