package clusterctl

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

func TestNewRun(t *testing.T) {
	raw := []byte("name: recs\npool: gpu\npriority: 4\n")
	spec := &jobs.Spec{Name: "recs", Pool: "gpu", Priority: 4, Raw: raw, File: "jobs/recs.yaml", Params: map[string]string{"date": "2026-11-01"}}
	now := time.Date(2026, 11, 1, 4, 0, 0, 123456789, time.UTC)
	plans := []sources.ShardPlan{{Plan: json.RawMessage(`{"f":1}`), Rows: 10}, {Plan: json.RawMessage(`{"f":2}`), Rows: 5}}
	prio := -3
	run, shards := NewRun(spec, RunOptions{ModelVersion: "abc", Plans: plans, SpecFile: "/abs/jobs/recs.yaml", Priority: &prio, Now: now})
	if !regexp.MustCompile(`^recs-20261101t040000-[0-9a-f]{4}$`).MatchString(run.ID) || run.ID != "recs-"+run.Version {
		t.Errorf("id %q version %q", run.ID, run.Version)
	}
	if run.State != jobs.RunPending || run.Pool != "gpu" || run.Priority != -3 || run.ModelVersion != "abc" || run.SpecFile != "/abs/jobs/recs.yaml" ||
		string(run.Spec) != string(raw) || run.ParamsKey != "date=2026-11-01" || run.SpecHash != spec.Hash() || run.Shards != 2 ||
		!run.CreatedAt.Equal(now.Truncate(time.Microsecond)) {
		t.Errorf("run = %+v", run)
	}
	if len(shards) != 2 || shards[1].Index != 1 || shards[1].EstRows != 5 || string(shards[1].Plan) != `{"f":2}` || shards[1].RunID != run.ID || shards[0].State != jobs.ShardPending {
		t.Errorf("shards = %+v", shards)
	}
	run, _ = NewRun(&jobs.Spec{Name: "x", Priority: 2, File: "x.yaml"}, RunOptions{})
	if run.Pool != jobs.DefaultPool || run.Priority != 2 || run.SpecFile != "x.yaml" {
		t.Errorf("defaults: %+v", run)
	}
}

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
