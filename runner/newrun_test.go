package runner

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
	run, shards := NewRun(spec, NewRunOptions{ModelVersion: "abc", Plans: plans, SpecFile: "/abs/jobs/recs.yaml", Priority: &prio, Now: now})
	if !regexp.MustCompile(`^recs-20261101t040000\.123456-[0-9a-f]{4}$`).MatchString(run.ID) || run.ID != "recs-"+run.Version {
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
	run, _ = NewRun(&jobs.Spec{Name: "x", Priority: 2, File: "x.yaml"}, NewRunOptions{})
	if run.Pool != jobs.DefaultPool || run.Priority != 2 || run.SpecFile != "x.yaml" {
		t.Errorf("defaults: %+v", run)
	}
}
