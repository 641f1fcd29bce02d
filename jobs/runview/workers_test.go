package runview

import (
	"encoding/json"
	"reflect"
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

// TestStatusJSONHolders: status --json lists the same holders as the text
// view, each with its heartbeat age and state, as fields added beside the
// contract's (which keep their names and values).
func TestStatusJSONHolders(t *testing.T) {
	shards := []jobs.Shard{
		{Index: 0, State: jobs.ShardRunning, Worker: "a-1/cpu"},
		{Index: 1, State: jobs.ShardRunning, Worker: "a-1/cpu"},
		{Index: 2, State: jobs.ShardRunning, Worker: "b-2/cuda:0"},
		{Index: 3, State: jobs.ShardRunning, Worker: "c-3/cpu"},
		{Index: 4, State: jobs.ShardCommitted, Worker: "d-4/cpu"},
	}
	list := []ledger.WorkerInfo{
		{ID: "a-1", HeartbeatAge: 3 * time.Second},
		{ID: "b-2", HeartbeatAge: 41 * time.Second, Lost: true},
	}
	st := StatusOf(From(jobs.Run{ID: "r"}, shards), nil)
	plain, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	st.Holders = HoldersOf(shards, list)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Holders []struct {
			Worker        string   `json:"worker"`
			Shards        int      `json:"shards"`
			State         string   `json:"state"`
			HeartbeatAgeS *float64 `json:"heartbeat_age_s"`
		} `json:"holders"`
		Shards ShardCounts `json:"shards"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Holders) != 3 || got.Shards.Running != 4 {
		t.Fatalf("holders %+v, shards %+v; want 3 holders of 4 running shards", got.Holders, got.Shards)
	}
	want := []struct {
		worker, state string
		shards        int
		age           float64 // -1: absent
	}{{"a-1/cpu", "up", 2, 3}, {"b-2/cuda:0", "lost", 1, 41}, {"c-3/cpu", "not registered", 1, -1}}
	for i, w := range want {
		h := got.Holders[i]
		if h.Worker != w.worker || h.State != w.state || h.Shards != w.shards ||
			(w.age < 0) != (h.HeartbeatAgeS == nil) || (h.HeartbeatAgeS != nil && *h.HeartbeatAgeS != w.age) {
			t.Errorf("holder %d = %+v (age %v), want %+v", i, h, h.HeartbeatAgeS, w)
		}
	}
	// Additive: every field of the status without holders is unchanged.
	var before, after map[string]any
	json.Unmarshal(plain, &before)
	json.Unmarshal(b, &after)
	delete(after, "holders")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("holders changed the contract's fields:\n%s\n%s", plain, b)
	}
	if _, ok := before["holders"]; ok {
		t.Error("a run with no holders prints holders")
	}
}
