package backfill

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// ProbeParams says what Probe measures.
type ProbeParams struct {
	Spec *jobs.Spec
	// Plans are the shards to sample from (the first Runs of them, cycling).
	Plans []sources.ShardPlan
	// Budget bounds the probe's wall time.
	Budget time.Duration
	// Runs is how many pipelines run at once, each with its own model
	// sessions, as `backfill --parallel` runs values (default 1).
	Runs int
}

// Probe measures the rows per second of spec's read → encode → infer
// pipeline at the spec's batch size on real samples, with Runs pipelines
// at once sharing this machine (no sink written). It is what the estimate
// of `backfill --dry-run` divides the rows by: measured, not a division of
// one pipeline's rate by the values run at once, since those share the
// machine's cores with each other and with ONNX Runtime's threads.
func Probe(ctx context.Context, p ProbeParams) (float64, int64, error) {
	if len(p.Plans) == 0 {
		return 0, 0, errors.New("probe: no shard to sample")
	}
	n := max(p.Runs, 1)
	jobsOpen := make([]*runner.Job, 0, n)
	defer func() {
		for _, j := range jobsOpen {
			j.Close()
		}
	}()
	for range n {
		job, err := runner.OpenJob(ctx, p.Spec)
		if err != nil {
			return 0, 0, err
		}
		jobsOpen = append(jobsOpen, job)
	}
	pctx, cancel := context.WithTimeout(ctx, p.Budget)
	defer cancel()
	var rows atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i, job := range jobsOpen {
		plan := p.Plans[i%len(p.Plans)]
		wg.Go(func() {
			_, errs[i] = job.ExecShard(pctx, runner.ShardTask{
				Run:   sinks.RunInfo{Job: p.Spec.Name, RunID: "probe", Version: "probe", Params: p.Spec.Params},
				Shard: jobs.Shard{RunID: "probe", Index: i, Plan: plan.Plan, EstRows: plan.Rows}, Rejects: discard{},
				ComputedAt: start, OnRows: func(n int64) { rows.Add(n) },
			})
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil && pctx.Err() == nil {
		return 0, 0, fmt.Errorf("probe: %w", err)
	}
	if rows.Load() == 0 || took <= 0 {
		return 0, 0, errors.New("probe: no row read within the budget")
	}
	return float64(rows.Load()) / took.Seconds(), rows.Load(), nil
}
