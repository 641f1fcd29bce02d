package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/backfill"
	"github.com/precog-ml/precog/sources"
)

// probeBudget bounds the streaming part of the probe behind an estimate.
const probeBudget = 3 * time.Second

// maxProbeRuns bounds the pipelines a --parallel estimate probes at once.
const maxProbeRuns = 8

// estimateParams is what printEstimate estimates.
type estimateParams struct {
	Spec *jobs.Spec
	// Plans are the shards the probe samples.
	Plans []sources.ShardPlan
	// Rows is every run's rows together; Runs is how many runs (values).
	Rows int64
	Runs int
	// Parallel is how many runs go at once.
	Parallel int
}

// printEstimate probes spec on a real sample of Plans' rows at the spec's
// batch size, writing through the spec's sinks into a throwaway version
// that is aborted (backfill.Probe), and prints the estimated wall time on
// this machine: each run's start-up and stage measured once, plus Rows at
// the probe's rate, with its margin from the probe's slowest and fastest
// second. For Parallel > 1 a second probe runs that many pipelines side by
// side (they share the cores, so the gain is rarely parallel×). The same
// lines for `backfill --dry-run` and `validate --estimate` (one run).
func printEstimate(ctx context.Context, w io.Writer, p estimateParams) error {
	one, err := backfill.Probe(ctx, backfill.ProbeParams{Spec: p.Spec, Plans: p.Plans, Budget: probeBudget, Runs: 1, Sinks: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "probe: %d rows at batch size %d, %.0f rows/s (read, encode, infer, write %s, commit)\n",
		one.Rows, p.Spec.Model.BatchSize, one.Rate, sinkNames(p.Spec))
	fixed := one.Open + one.Stage
	fmt.Fprintf(w, "probe: start-up %s and stage %s per run\n", estDuration(one.Open), estDuration(one.Stage))
	runs := max(p.Runs, 1)
	est := func(r backfill.ProbeResult, parallel int) (mid, lo, hi time.Duration) {
		waves := time.Duration((runs + parallel - 1) / parallel)
		at := func(rate float64) time.Duration {
			return waves*fixed + time.Duration(float64(p.Rows)/rate*float64(time.Second))
		}
		return at(r.Rate), at(r.High), at(r.Low)
	}
	mid, lo, hi := est(one, 1)
	if p.Parallel <= 1 {
		fmt.Fprintf(w, "estimate: %s on this machine (%s)\n", estDuration(mid), margin(one, lo, hi))
		return nil
	}
	n := min(p.Parallel, maxProbeRuns)
	rn, err := backfill.Probe(ctx, backfill.ProbeParams{Spec: p.Spec, Plans: p.Plans, Budget: probeBudget, Runs: n, Sinks: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "probe: %d runs at once, %.0f rows/s together (%.1fx one run)\n", n, rn.Rate, rn.Rate/one.Rate)
	pmid, plo, phi := est(rn, n)
	fmt.Fprintf(w, "estimate: %s on this machine, %s with --parallel %d (%s)\n",
		estDuration(mid), estDuration(pmid), p.Parallel, margin(rn, plo, phi))
	return nil
}

// sinkNames lists the spec's sinks, as the probe writes them.
func sinkNames(spec *jobs.Spec) string {
	var names []string
	if spec.Sinks.Parquet != nil {
		names = append(names, "parquet")
	}
	if spec.Sinks.Postgres != nil {
		names = append(names, "postgres")
	}
	if spec.Sinks.Redis != nil {
		names = append(names, "redis")
	}
	if len(names) == 0 {
		return "no sink"
	}
	return strings.Join(names, ", ")
}

// estDuration prints an estimate: to the second, to a tenth below 10 s
// (a short backfill's estimate would round to a large error).
func estDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// margin says the estimate's range at the probe's fastest and slowest
// third, or why there is none.
func margin(r backfill.ProbeResult, lo, hi time.Duration) string {
	if r.Low <= 0 {
		return fmt.Sprintf("no margin: the probe saw %d units, too few to compare its thirds", r.Units)
	}
	return fmt.Sprintf("%s to %s at the probe's fastest and slowest third", estDuration(lo), estDuration(hi))
}
