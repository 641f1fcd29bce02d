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

// printEstimate probes spec's model on a real sample of plans' rows at the
// spec's batch size and prints the estimated wall time of rows on this
// machine and, for workers > 1, on that many workers: the same lines for
// `backfill --dry-run` (rows of every partition) and `validate --estimate`
// (one run).
func printEstimate(ctx context.Context, w io.Writer, spec *jobs.Spec, plans []sources.ShardPlan, rows int64, workers int) error {
	rate, sample, err := backfill.Probe(ctx, spec, plans, probeBudget)
	if err != nil {
		return err
	}
	one := time.Duration(float64(rows) / rate * float64(time.Second))
	fmt.Fprintf(w, "probe: %d rows at batch size %d, %.0f rows/s (read, encode, infer)\n", sample, spec.Model.BatchSize, rate)
	fmt.Fprintf(w, "estimate: %s on this machine", runview.Duration(one))
	if workers > 1 {
		fmt.Fprintf(w, ", %s on %d workers (--parallel %d)", runview.Duration(one/time.Duration(workers)), workers, workers)
	}
	fmt.Fprintln(w)
	return nil
}
