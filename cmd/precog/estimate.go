package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner/backfill"
	"github.com/precog-ml/precog/sources"
)

// probeBudget bounds the probe behind an estimate.
const probeBudget = 3 * time.Second

// maxProbeRuns bounds the pipelines a --parallel estimate probes at once.
const maxProbeRuns = 8

// printEstimate probes spec's model on a real sample of plans' rows at the
// spec's batch size and prints the estimated wall time of rows on this
// machine and, for parallel > 1, with that many runs at once, measured by a
// second probe of that many pipelines side by side (they share the cores,
// so the gain is rarely parallel×): the same lines for `backfill --dry-run`
// (rows of every partition) and `validate --estimate` (one run).
func printEstimate(ctx context.Context, w io.Writer, spec *jobs.Spec, plans []sources.ShardPlan, rows int64, parallel int) error {
	rate, sample, err := backfill.Probe(ctx, backfill.ProbeParams{Spec: spec, Plans: plans, Budget: probeBudget, Runs: 1})
	if err != nil {
		return err
	}
	one := time.Duration(float64(rows) / rate * float64(time.Second))
	fmt.Fprintf(w, "probe: %d rows at batch size %d, %.0f rows/s (read, encode, infer)\n", sample, spec.Model.BatchSize, rate)
	if parallel <= 1 {
		fmt.Fprintf(w, "estimate: %s on this machine\n", runview.Duration(one))
		return nil
	}
	n := min(parallel, maxProbeRuns)
	rateN, _, err := backfill.Probe(ctx, backfill.ProbeParams{Spec: spec, Plans: plans, Budget: probeBudget, Runs: n})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "probe: %d runs at once, %.0f rows/s together (%.1fx one run)\n", n, rateN, rateN/rate)
	fmt.Fprintf(w, "estimate: %s on this machine, %s with --parallel %d\n", runview.Duration(one),
		runview.Duration(time.Duration(float64(rows)/rateN*float64(time.Second))), parallel)
	return nil
}
