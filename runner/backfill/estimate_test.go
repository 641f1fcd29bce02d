package backfill

import (
	"testing"
	"time"
)

// TestWindowsSpread: the margin is the slowest and fastest third of the
// probe's progress (each third's rows over the time since the one before
// ended), scaled to the probe's own rate; a full event log merges
// neighbours and keeps every row.
func TestWindowsSpread(t *testing.T) {
	w := newWindows(time.Now())
	w.events = []probeEvent{{at: time.Second, rows: 100}, {at: 2 * time.Second, rows: 100}, {at: 4 * time.Second, rows: 100}}
	low, high := w.spread(75, 3) // 300 rows over 4 s: scale 1
	if low != 50 || high != 100 {
		t.Fatalf("spread = %v..%v rows/s, want 50..100", low, high)
	}
	// The drain after the last event halves the probe's rate: both halve.
	if low, high = w.spread(37.5, 3); low != 25 || high != 50 {
		t.Fatalf("spread at half the rate = %v..%v rows/s, want 25..50", low, high)
	}
	// One event: one window, the probe's rate both ways.
	one := newWindows(time.Now())
	one.events = []probeEvent{{at: 2 * time.Second, rows: 10}}
	if low, high = one.spread(5, 3); low != 5 || high != 5 {
		t.Fatalf("one event: %v..%v, want 5..5", low, high)
	}
	full := newWindows(time.Now())
	for range maxProbeEvents + 1 {
		full.add(2)
	}
	if got := full.total(); got != 2*(maxProbeEvents+1) || len(full.events) > maxProbeEvents {
		t.Fatalf("after %d events: %d rows in %d events, want %d rows in at most %d", maxProbeEvents+1, got, len(full.events), 2*(maxProbeEvents+1), maxProbeEvents)
	}
}
