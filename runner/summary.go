package runner

import (
	"fmt"
	"io"
	"time"
)

// WriteSummary prints a succeeded local run for people: what precog run
// and precog retry print on stdout as their result.
func (res Result) WriteSummary(w io.Writer) {
	r := res.Run
	rate := 0.0
	if s := res.Duration.Seconds(); s > 0 {
		rate = float64(res.RowsThisProcess) / s
	}
	fmt.Fprintf(w, "run %s succeeded (version %s, model %s)\n", r.ID, r.Version, r.ModelVersion)
	if res.Resumed {
		fmt.Fprintf(w, "  resumed:   %d of %d shards were already committed\n", res.SkippedShards, r.Shards)
	}
	fmt.Fprintf(w, "  rows:      %d in, %d out, %d rejected\n", r.Counts.RowsIn, r.Counts.RowsOut, r.Counts.Rejected)
	if r.Counts.RowsIn == 0 {
		fmt.Fprintln(w, "  note:      the dataset has zero rows; an empty result was published")
	}
	fmt.Fprintf(w, "  duration:  %s (%.0f rows/s)\n", res.Duration.Round(time.Millisecond), rate)
	if st := res.Stages.String(); st != "" {
		fmt.Fprintf(w, "  stages:    %s busy, summed over the shards in flight (the busiest bounds the run)\n", st)
	}
	if r.Counts.Rejected > 0 {
		fmt.Fprintf(w, "  rejects:   %s\n", res.RejectsDir)
	}
	for _, o := range res.Outputs {
		fmt.Fprintf(w, "  output:    %s\n", o)
	}
}
