package backfill

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sources"
)

// PartitionPlan is one value as `backfill --dry-run` lists it: found or
// missing, with rows and shards from metadata.
type PartitionPlan struct {
	Value  string `json:"value"`
	Found  bool   `json:"found"`
	Error  string `json:"error,omitempty"`
	Rows   int64  `json:"rows"`
	Shards int    `json:"shards"`
}

// PlanPartitions plans every value without reading data; a value whose
// source is missing is listed with its error, not returned as one.
func PlanPartitions(ctx context.Context, parts []Partition) ([]PartitionPlan, map[string][]sources.ShardPlan) {
	out := make([]PartitionPlan, len(parts))
	plans := map[string][]sources.ShardPlan{}
	for i, p := range parts {
		out[i].Value = p.Value
		src, err := runner.OpenSource(ctx, p.Spec)
		if err == nil {
			var ps []sources.ShardPlan
			if ps, err = src.Plan(ctx, p.Spec.Source.RowsPerShard); err == nil {
				out[i].Found, out[i].Shards = true, len(ps)
				for _, s := range ps {
					out[i].Rows += s.Rows
				}
				plans[p.Value] = ps
			}
		}
		if err != nil {
			out[i].Error = err.Error()
		}
	}
	return out, plans
}

// discard drops rejected rows (a probe keeps nothing).
type discard struct{}

func (discard) Reject(string, string, string) error { return nil }

// Probe measures the rows per second of spec's read → encode → infer
// pipeline at the spec's batch size on a real sample: the first shard of
// plans, for at most budget (no sink written). It is what the estimate of
// `backfill --dry-run` divides the rows by.
func Probe(ctx context.Context, spec *jobs.Spec, plans []sources.ShardPlan, budget time.Duration) (float64, int64, error) {
	if len(plans) == 0 {
		return 0, 0, errors.New("probe: no shard to sample")
	}
	job, err := runner.OpenJob(ctx, spec)
	if err != nil {
		return 0, 0, err
	}
	defer job.Close()
	pctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var rows atomic.Int64
	start := time.Now()
	_, err = job.ExecShard(pctx, runner.ShardTask{
		Run:   sinks.RunInfo{Job: spec.Name, RunID: "probe", Version: "probe", Params: spec.Params},
		Shard: jobs.Shard{RunID: "probe", Plan: plans[0].Plan, EstRows: plans[0].Rows}, Rejects: discard{},
		ComputedAt: start, OnRows: func(n int64) { rows.Add(n) },
	})
	took := time.Since(start)
	if err != nil && pctx.Err() == nil {
		return 0, 0, fmt.Errorf("probe: %w", err)
	}
	if rows.Load() == 0 || took <= 0 {
		return 0, 0, errors.New("probe: no row read within the budget")
	}
	return float64(rows.Load()) / took.Seconds(), rows.Load(), nil
}
