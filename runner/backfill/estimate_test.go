package backfill

import (
	"testing"
	"time"
)

// TestWindowsSpread: the margin is the slowest and fastest third of the
// probe's progress (each third's rows over the time since the one before
// ended), scaled to the probe's own rate; too few units give no margin;
// a full event log merges neighbours and keeps every row.
func TestWindowsSpread(t *testing.T) {
	w := newWindows(time.Now())
	// Three thirds of three events each: 300 rows in 3 s, 300 in 3 s, 300 in 6 s.
	for _, at := range []time.Duration{1, 2, 3, 4, 5, 6, 8, 10, 12} {
		w.events = append(w.events, probeEvent{at: at * time.Second, rows: 100})
	}
	low, high := w.spread(75, 3) // 900 rows over 12 s: scale 1
	if low != 50 || high != 100 {
		t.Fatalf("spread = %v..%v rows/s, want 50..100", low, high)
	}
	// The drain after the last event halves the probe's rate: both halve.
	if low, high = w.spread(37.5, 3); low != 25 || high != 50 {
		t.Fatalf("spread at half the rate = %v..%v rows/s, want 25..50", low, high)
	}
	// Four units, two of them a burst 10 ms apart: too few for a margin
	// (before, the burst's third gave a rate 100x the probe's).
	few := newWindows(time.Now())
	few.events = []probeEvent{{at: time.Second, rows: 10}, {at: time.Second + 10*time.Millisecond, rows: 10}, {at: 2 * time.Second, rows: 10}, {at: 3 * time.Second, rows: 10}}
	if low, high = few.spread(13, 3); low != 0 || high != 0 {
		t.Fatalf("four events: %v..%v, want no margin (0..0)", low, high)
	}
	full := newWindows(time.Now())
	for range maxProbeEvents + 1 {
		full.add(2)
	}
	if got := full.total(); got != 2*(maxProbeEvents+1) || len(full.events) > maxProbeEvents {
		t.Fatalf("after %d events: %d rows in %d events, want %d rows in at most %d", maxProbeEvents+1, got, len(full.events), 2*(maxProbeEvents+1), maxProbeEvents)
	}
}
