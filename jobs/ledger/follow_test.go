package ledger

import (
	"testing"
	"time"
)

func TestRate(t *testing.T) {
	var r Rate
	t0 := time.Unix(0, 0)
	if r.Add(t0, 0); r.PerSecond() != 0 {
		t.Errorf("one sample: %v", r.PerSecond())
	}
	for i := 1; i <= 60; i++ {
		rows := int64(i) * 100 // 100 rows/s for a minute…
		if i > 30 {
			rows = 3000 + int64(i-30)*1000 // …then 1000 rows/s
		}
		r.Add(t0.Add(time.Duration(i)*time.Second), rows)
	}
	if got := r.PerSecond(); got < 950 || got > 1050 {
		t.Errorf("rate over the last %s = %v, want about 1000", RateWindow, got)
	}
	r.Add(t0.Add(61*time.Second), 10) // shards reopened: counts went down
	if got := r.PerSecond(); got != 0 {
		t.Errorf("after a drop: %v, want 0 until a new sample", got)
	}
}
