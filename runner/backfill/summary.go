package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
)

// ValueLine is how one value of a range ended, as `precog backfill` lists
// it: name=value, a status, and its detail (empty for none).
type ValueLine struct {
	Value, Status, Detail string
}

// Summarize says how each value of a range run on this machine ended and
// returns the error the range ends with: interrupted (wrapping
// context.Canceled) when a value was not started or was interrupted, else
// the values that failed, else those cancelled; nil when every value
// succeeded. name is the param the values fill.
func Summarize(name string, values []string, results []ValueResult, now time.Time) ([]ValueLine, error) {
	lines := make([]ValueLine, 0, len(results))
	var failed, cancelled []string
	unfinished := 0
	for i, r := range results {
		l := ValueLine{Value: name + "=" + values[i]}
		switch {
		case !r.Started:
			unfinished++
			l.Status = "not started"
		case errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, runner.ErrInterrupted):
			unfinished++
			l.Status = "interrupted (resumes on the same command)"
		case r.Res.Run.State == jobs.RunCancelled:
			cancelled = append(cancelled, l.Value)
			l.Status, l.Detail = "cancelled", fmt.Sprintf("run %s: %s", r.Res.Run.ID, r.Res.Run.Error)
		case r.Err != nil:
			failed = append(failed, l.Value)
			l.Status, l.Detail = "FAILED", r.Err.Error()
		case r.Res.AlreadyDone:
			l.Status, l.Detail = "already done", fmt.Sprintf("run %s (--force recomputes)", r.Res.Run.ID)
		default:
			c := r.Res.Run.Counts
			l.Status = "succeeded"
			l.Detail = fmt.Sprintf("run %s, version %s, %d rows in, %d out, %d rejected, %s", r.Res.Run.ID, r.Res.Run.Version,
				c.RowsIn, c.RowsOut, c.Rejected, runview.RunDuration(r.Res.Run, now).Round(time.Millisecond))
		}
		lines = append(lines, l)
	}
	switch {
	case unfinished > 0:
		return lines, fmt.Errorf("backfill interrupted (%d of %d values not finished, %d failed): %w", unfinished, len(values), len(failed), context.Canceled)
	case len(failed) > 0:
		return lines, fmt.Errorf("backfill: %d of %d values failed: %s", len(failed), len(values), strings.Join(failed, ", "))
	case len(cancelled) > 0:
		return lines, fmt.Errorf("backfill: %d of %d values cancelled (precog retry BACKFILL runs them again): %s", len(cancelled), len(values), strings.Join(cancelled, ", "))
	}
	return lines, nil
}
