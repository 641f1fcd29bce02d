package runview

import (
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestDetailHolderHeartbeats: with the ledger's worker list, each holder
// shows its heartbeat age; a lost holder's leases show as expiring, a
// holder missing from the list as not registered.
func TestDetailHolderHeartbeats(t *testing.T) {
	shards := []jobs.Shard{
		{Index: 0, State: jobs.ShardRunning, Worker: "a-1/cpu"},
		{Index: 1, State: jobs.ShardRunning, Worker: "a-1/cpu"},
		{Index: 2, State: jobs.ShardRunning, Worker: "b-2/cuda:0"},
		{Index: 3, State: jobs.ShardRunning, Worker: "c-3/cpu"},
	}
	list := []ledger.WorkerInfo{
		{ID: "a-1", HeartbeatAge: 3 * time.Second},
		{ID: "b-2", HeartbeatAge: 41 * time.Second, Lost: true},
	}
	got := workers(shards, list)
	want := "a-1/cpu (2) [heartbeat 3s ago], b-2/cuda:0 (1) [LOST: no heartbeat for 41s, its leases expiring], c-3/cpu (1) [not registered]"
	if got != want {
		t.Fatalf("workers =\n%s\nwant\n%s", got, want)
	}
	if got := workers(shards, nil); got != "a-1/cpu (2), b-2/cuda:0 (1), c-3/cpu (1)" {
		t.Fatalf("workers without a list = %s", got)
	}
	var b strings.Builder
	if err := (Detail{Run: From(jobs.Run{ID: "r"}, shards), Shards: shards, Workers: list}).Write(&b); err != nil || !strings.Contains(b.String(), "heartbeat 3s ago") {
		t.Fatalf("detail (%v):\n%s", err, b.String())
	}
}
