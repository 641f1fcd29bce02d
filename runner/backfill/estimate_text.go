package backfill

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// WriteEstimate estimates p (Estimate) and writes the wall time on this
// machine with the probe it comes from: the same lines for `backfill
// --dry-run` and `validate --estimate` (one run). Nothing is written when
// the first probe failed (its error is returned); a failed parallel probe
// is returned after the lines of one run at a time.
func WriteEstimate(ctx context.Context, w io.Writer, p EstimateParams) error {
	e, err := Estimate(ctx, p)
	if e.Probes == 0 {
		return err
	}
	one := e.One
	fmt.Fprintf(w, "probe: %d rows at batch size %d, %.0f rows/s (read, encode, infer, write %s, commit)\n",
		one.Rows, one.Batch, one.Rate, sinkNames(p.Spec))
	fmt.Fprintf(w, "probe: start-up %s and stage %s per run, ledger %s (%d shards, %s a commit)\n",
		estDuration(one.Open), estDuration(one.Stage), estDuration(e.Ledger), p.Shards, estDuration(e.Txn))
	if p.Parallel <= 1 {
		fmt.Fprintf(w, "estimate: %s on this machine (%s)\n", estDuration(e.Serial.Mid), margin(one, e.Serial))
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "probe: %d runs at once, %.0f rows/s together (%.1fx one run)\n", e.Runs, e.Together.Rate, e.Together.Rate/one.Rate)
	fmt.Fprintf(w, "estimate: %s on this machine, %s with --parallel %d (%s)\n",
		estDuration(e.Serial.Mid), estDuration(e.Parallel.Mid), p.Parallel, margin(e.Together, e.Parallel))
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
func margin(r ProbeResult, t WallTime) string {
	if r.Low <= 0 {
		return fmt.Sprintf("no margin: the probe saw %d units, too few to compare its thirds", r.Units)
	}
	return fmt.Sprintf("%s to %s at the probe's fastest and slowest third", estDuration(t.Low), estDuration(t.High))
}
