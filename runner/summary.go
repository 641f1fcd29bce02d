package runner

import (
	"fmt"
	"io"
	"time"
)

// afterStartup is the summary's rate after start-up, when start-up took a
// tenth of the run or more (a GPU's CUDA start-up before a short run):
// "; 20000000 rows/s after 2.9s of start-up".
func (res Result) afterStartup() string {
	work := res.Duration - res.Startup
	if res.Startup <= 0 || work <= 0 || res.Startup*10 < res.Duration {
		return ""
	}
	return fmt.Sprintf("; %.0f rows/s after %s of start-up", float64(res.RowsThisProcess)/work.Seconds(), res.Startup.Round(time.Millisecond))
}

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
	fmt.Fprintf(w, "  duration:  %s (%.0f rows/s%s)\n", res.Duration.Round(time.Millisecond), rate, res.afterStartup())
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
