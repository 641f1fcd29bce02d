package runview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

func TestFromAndJSON(t *testing.T) {
	created := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	r := jobs.Run{ID: "recs-1", Job: "recs", State: jobs.RunPublishing, Counts: jobs.Counts{RowsIn: 150, RowsOut: 148, Rejected: 2},
		Params: map[string]string{"date": "2026-11-01"}, CreatedAt: created, UpdatedAt: created.Add(time.Minute)}
	shards := []jobs.Shard{{EstRows: 100, State: jobs.ShardCommitted}, {EstRows: 100, State: jobs.ShardFailed}, {EstRows: 50, State: jobs.ShardPending}}
	v := From(r, shards)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "job", "state", "rows_done", "rows_total", "rejected", "shards", "scheduled_for", "created_at", "finished_at", "error"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	if v.State != "running" || v.RowsTotal != 250 || v.RowsDone != 150 || v.Shards != (ShardCounts{Pending: 1, Committed: 1, Failed: 1}) || v.FinishedAt != "" {
		t.Errorf("view = %+v", v)
	}
	r.State = jobs.RunCancelled
	if v := From(r, shards); v.FinishedAt != "2026-11-01T04:01:00Z" || v.State != "cancelled" {
		t.Errorf("terminal view = %+v", v)
	}
	var buf bytes.Buffer
	if err := Table(&buf, []Run{v}); err != nil || !strings.Contains(buf.String(), "recs-1") || !strings.Contains(buf.String(), "60%") {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
}

func TestDetail(t *testing.T) {
	created := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	r := jobs.Run{ID: "recs-1", Job: "recs", State: jobs.RunRunning, Counts: jobs.Counts{RowsIn: 1000},
		Params: map[string]string{"date": "2026-11-01"}, CreatedAt: created, UpdatedAt: created}
	shards := []jobs.Shard{
		{Index: 0, EstRows: 1000, State: jobs.ShardCommitted},
		{Index: 1, EstRows: 1000, State: jobs.ShardRunning, Worker: "host-b-2"},
		{Index: 2, EstRows: 1000, State: jobs.ShardRunning, Worker: "host-a-1"},
		{Index: 3, EstRows: 1000, State: jobs.ShardRunning, Worker: "host-a-1"},
	}
	for i := 4; i < 11; i++ {
		shards = append(shards, jobs.Shard{Index: i, EstRows: 1000, State: jobs.ShardFailed, Attempts: 3, Error: "boom"})
	}
	v := FromAt(r, shards, created.Add(10*time.Second))
	if v.DurationS != 10 || v.RowsPerS != 100 || v.Pool != jobs.DefaultPool {
		t.Errorf("view = %+v", v)
	}
	var buf bytes.Buffer
	if err := (Detail{Run: v, Shards: shards, Rate: 50}).Write(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"recs (params date=2026-11-01)", "9.1%", "50 rows/s", "ETA 3m20s",
		"1 committed, 3 running, 0 pending, 7 failed (of 11)", "host-a-1 (2), host-b-2 (1)", "shard 4 (3 attempts): boom", "… 2 more"} {
		if !strings.Contains(out, want) {
			t.Errorf("detail lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "shard 9 ") {
		t.Errorf("detail lists more than %d failed shards:\n%s", DefaultMaxFailed, out)
	}
}

// TestStatusRejectSample: status JSON is the run object with every field
// of the contract, plus reject_sample ([] when none); the detail view lists
// a few sampled rejects under the rows line and says where the rest are.
func TestStatusRejectSample(t *testing.T) {
	created := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	r := jobs.Run{ID: "recs-1", Job: "recs", State: jobs.RunSucceeded, Counts: jobs.Counts{RowsIn: 100, RowsOut: 93, Rejected: 7},
		CreatedAt: created, UpdatedAt: created.Add(time.Minute)}
	shards := []jobs.Shard{{Index: 0, EstRows: 100, State: jobs.ShardCommitted}}
	var sample []jobs.Reject
	for i := range 6 {
		sample = append(sample, jobs.NewReject(i/3, fmt.Sprintf("u%d", i), fmt.Sprintf("data/part-%d.parquet row %d", i/3, 10+i), "non-finite output score (NaN)"))
	}
	v := From(r, shards)

	empty, err := json.Marshal(StatusOf(v, nil))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(empty, &m); err != nil {
		t.Fatal(err)
	}
	plain, _ := json.Marshal(v)
	var pm map[string]any
	_ = json.Unmarshal(plain, &pm)
	for k := range pm {
		if _, ok := m[k]; !ok {
			t.Errorf("status JSON lacks the run's %q: %s", k, empty)
		}
	}
	if s, ok := m["reject_sample"].([]any); !ok || len(s) != 0 || len(m) != len(pm)+1 {
		t.Errorf("status JSON without rejects: reject_sample = %#v, want []; %s", m["reject_sample"], empty)
	}

	b, _ := json.Marshal(StatusOf(v, sample))
	var raw map[string]json.RawMessage
	var rs []map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || string(raw["id"]) != `"recs-1"` {
		t.Fatalf("status JSON %s: %v", b, err)
	}
	if err := json.Unmarshal(raw["reject_sample"], &rs); err != nil {
		t.Fatalf("reject_sample %s: %v", raw["reject_sample"], err)
	}
	if len(rs) != 6 || rs[4]["shard"] != 1.0 || rs[4]["key"] != "u4" ||
		rs[4]["position"] != "data/part-1.parquet row 14" || rs[4]["reason"] != "non-finite output score (NaN)" {
		t.Errorf("reject_sample = %v", rs)
	}

	var buf bytes.Buffer
	if err := (Detail{Run: v, Shards: shards, Rejects: sample}).Write(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("detail:\n%s", out)
	for _, want := range []string{"7 rejected\nrejects", "shard 0, data/part-0.parquet row 10: non-finite output score (NaN) (key u0)",
		"shard 1, data/part-1.parquet row 14: non-finite output score (NaN) (key u4)", "… 2 more: precog rejects recs-1 lists every stored one"} {
		if !strings.Contains(out, want) {
			t.Errorf("detail lacks %q:\n%s", want, out)
		}
	}
	long := jobs.NewReject(2, "k", strings.Repeat("s3://bucket/", 30)+"part-9.parquet row 123", "null key")
	buf.Reset()
	if err := (Detail{Run: v, Rejects: []jobs.Reject{long}}).Write(&buf); err != nil || !strings.Contains(buf.String(), "…") || !strings.Contains(buf.String(), "/part-9.parquet row 123: null key") {
		t.Errorf("a long position lost its file and row (%v):\n%s", err, buf.String())
	}
	if strings.Contains(out, "row 15") {
		t.Errorf("detail lists more than %d rejects:\n%s", DefaultMaxRejects, out)
	}
	buf.Reset()
	v.Rejected = 0
	if err := (Detail{Run: v, Shards: shards}).Write(&buf); err != nil || strings.Contains(buf.String(), "rejects") {
		t.Errorf("detail of a run without rejects mentions rejects (%v):\n%s", err, buf.String())
	}
}

// TestPublicStates: every state a ledger stores shows as itself, except
// publishing (running), then interrupted: held is among them.
func TestPublicStates(t *testing.T) {
	want := []string{"pending", "running", "held", "succeeded", "failed", "cancelled", "interrupted"}
	if got := PublicStates(); !slices.Equal(got, want) {
		t.Errorf("PublicStates = %v, want %v", got, want)
	}
	for _, s := range jobs.RunStates() {
		if !slices.Contains(PublicStates(), publicState(s)) {
			t.Errorf("stored state %s shows as %s, not a public state", s, publicState(s))
		}
	}
}

// TestTableOfNone: a table of no runs says there are none yet instead of
// a bare header.
func TestTableOfNone(t *testing.T) {
	var b strings.Builder
	if err := Table(&b, nil); err != nil || b.String() != "no runs yet\n" {
		t.Fatalf("Table(nil) = %q, %v", b.String(), err)
	}
}

// TestDetailStagedData: a failed cluster run's detail view says until when
// its staged data is kept and that precog retry resumes it, or that it was
// removed and a retry recomputes; other runs say neither.
func TestDetailStagedData(t *testing.T) {
	at := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	v := FromAt(jobs.Run{ID: "recs-1", Job: "recs", State: jobs.RunFailed, Error: "shard 3 out of attempts", CreatedAt: at, UpdatedAt: at}, nil, at)
	detail := func(v Run) string {
		t.Helper()
		var buf bytes.Buffer
		if err := (Detail{Run: v}).Write(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	if out := detail(v); strings.Contains(out, "staged data") {
		t.Errorf("a run with nothing known of its staged data mentions it:\n%s", out)
	}
	kept := v
	kept.StagedKeptUntil = "2026-11-02T04:00:00Z"
	if out := detail(kept); !strings.Contains(out, "staged data kept until 2026-11-02T04:00:00Z; precog retry recs-1 resumes the run") {
		t.Errorf("kept: detail lacks the retry line:\n%s", out)
	}
	gone := v
	gone.StagedRemoved = true
	if out := detail(gone); !strings.Contains(out, "staged data removed; precog retry recs-1 recomputes") {
		t.Errorf("removed: detail lacks the retry line:\n%s", out)
	}
}
