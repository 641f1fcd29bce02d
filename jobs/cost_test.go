package jobs

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestShardCostJSON: a shard stored before costs were recorded (no "cost"
// key, as the embedded ledger stores it) reads with a zero cost, and a
// zero cost adds nothing to what is stored.
func TestShardCostJSON(t *testing.T) {
	var s Shard
	old := `{"run_id":"r","index":0,"plan":null,"est_rows":5,"state":"committed","attempts":1,"counts":{"rows_in":5,"rows_out":5,"rejected":0},"updated_at":"2026-11-01T00:00:00Z"}`
	if err := json.Unmarshal([]byte(old), &s); err != nil || !s.Cost.IsZero() || s.Counts.RowsIn != 5 {
		t.Fatalf("old shard: %+v, %v", s, err)
	}
	b, _ := json.Marshal(s)
	if strings.Contains(string(b), "cost") {
		t.Errorf("zero cost stored: %s", b)
	}
	s.Cost = Cost{DeviceSeconds: 2, GPURows: 10, GPUSampledSeconds: 2, GPUBusySeconds: 1.5}
	b, _ = json.Marshal(s)
	var back Shard
	if err := json.Unmarshal(b, &back); err != nil || back.Cost != s.Cost {
		t.Fatalf("round trip: %+v, %v", back.Cost, err)
	}
	if busy, ok := back.Cost.GPUBusy(); !ok || busy != 0.75 {
		t.Errorf("busy %v %v, want 0.75", busy, ok)
	}
	if r := back.Cost.RowsPerGPUSecond(); r != 5 {
		t.Errorf("rows per GPU-second %v, want 5", r)
	}
	if _, ok := (Cost{CPUSeconds: 1}).GPUBusy(); ok {
		t.Error("busy known without samples")
	}
}
