package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// Failures are reported per value; an interrupted range ends as
// interrupted.
func TestReportRange(t *testing.T) {
	const n = 12
	results := make([]backfill.ValueResult, n)
	for i := range results {
		results[i] = backfill.ValueResult{Res: runner.Result{Run: jobs.Run{ID: "r"}}, Started: true}
		if i%5 == 1 {
			results[i] = backfill.ValueResult{Err: errors.New("boom"), Started: true}
		}
	}
	values := make([]string, n)
	for i := range values {
		values[i] = "v" + string(rune('a'+i))
	}
	var out strings.Builder
	err := reportRange(&out, "dt", values, results, time.Second)
	if err == nil || err.Error() != "backfill: 3 of 12 values failed: dt=vb, dt=vg, dt=vl" {
		t.Errorf("reportRange = %v", err)
	}
	if strings.Count(out.String(), "FAILED") != 3 || strings.Count(out.String(), "succeeded") != 9 {
		t.Errorf("report:\n%s", out.String())
	}

	// Cancelled: the values not started are left; the command ends as
	// interrupted.
	results = make([]backfill.ValueResult, n)
	results[0] = backfill.ValueResult{Err: context.Canceled, Started: true}
	results[1] = backfill.ValueResult{Err: context.Canceled, Started: true}
	if err := reportRange(&out, "dt", values, results, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: %v", err)
	}
}
