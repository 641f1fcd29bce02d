package ledger

import "testing"

// TestHolderName: each claim loop of a worker has its own lease holder
// name, and every one of them maps back to the worker (the run view's
// heartbeat of a holder, the dashboard's timeline lanes).
func TestHolderName(t *testing.T) {
	cases := []struct {
		device string
		slot   int
		want   string
	}{{"cpu", 0, "host-7/cpu"}, {"cpu", 1, "host-7/cpu#2"}, {"cuda:1", 7, "host-7/cuda:1#8"}}
	seen := map[string]bool{}
	for _, c := range cases {
		got := HolderName("host-7", c.device, c.slot)
		if got != c.want {
			t.Errorf("HolderName(host-7, %s, %d) = %q, want %q", c.device, c.slot, got, c.want)
		}
		if w := WorkerOf(got); w != "host-7" {
			t.Errorf("WorkerOf(%q) = %q, want host-7", got, w)
		}
		if seen[got] {
			t.Errorf("%q named twice", got)
		}
		seen[got] = true
	}
}
