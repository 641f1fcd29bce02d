package runview

import (
	"bytes"
	"encoding/json"
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
