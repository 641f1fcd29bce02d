package runner

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestProgressBar: the bar fills with the rows done (never past full),
// counts read short, an unknown ETA is "--", and rejects show only when
// there are some.
func TestProgressBar(t *testing.T) {
	p := Progress{RunID: "r", RowsDone: 1_500_000, RowsTotal: 3_000_000, Rate: 25_000, ETA: 60 * time.Second, ShardsDone: 3, ShardsTotal: 6}
	want := strings.Repeat("█", 15) + strings.Repeat("░", 15) + "  50.0%  1.5M/3.0M rows  25k rows/s  ETA 1m0s  shards 3/6"
	if got := p.Bar(); got != want {
		t.Errorf("Bar =\n%q\nwant\n%q", got, want)
	}
	p.RowsDone, p.ETA, p.Rejected = 4_000_000, 0, 7
	if got := p.Bar(); !strings.HasPrefix(got, strings.Repeat("█", 30)+" 100.0%") || !strings.Contains(got, "ETA --") || !strings.HasSuffix(got, "  rejected 7") {
		t.Errorf("Bar past the plan = %q, want a full bar, no ETA and the rejects", got)
	}
	if got := fmt.Sprint((Progress{}).Bar()); !strings.HasPrefix(got, strings.Repeat("░", 30)+"   0.0%") {
		t.Errorf("Bar of nothing planned = %q", got)
	}
	args := p.LogArgs()
	if len(args) != 14 || args[0] != "run" || args[1] != "r" || args[7] != "3/6" || args[11] != int64(7) {
		t.Errorf("LogArgs = %v", args)
	}
}
