package backfill

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
)

// Date is one value of a backfill as `precog status ID` shows it.
type Date struct {
	Value     string  `json:"value"`
	Run       string  `json:"run"`
	State     string  `json:"state"`
	RowsDone  int64   `json:"rows_done"`
	RowsTotal int64   `json:"rows_total"`
	Rejected  int64   `json:"rejected"`
	DurationS float64 `json:"duration_s"`
	Error     string  `json:"error,omitempty"`
	// Attempts counts the runs the value had in this backfill.
	Attempts int `json:"attempts"`
}

// View is a backfill as `precog status ID --json` prints it: the run
// fields of the contract summed over its values' current runs, plus the
// range and one entry per value.
type View struct {
	runview.Run
	Param    string  `json:"param"`
	From     string  `json:"from"`
	To       string  `json:"to"`
	Step     string  `json:"step"`
	Parallel int     `json:"parallel"`
	ETAS     float64 `json:"eta_s"`
	Dates    []Date  `json:"dates"`
}

// Runs are the current runs of b's values with their views, by run id.
func Runs(ctx context.Context, led ledger.Ledger, b ledger.Backfill, now time.Time) (map[string]jobs.Run, map[string]runview.Run, error) {
	runs := map[string]jobs.Run{}
	views := map[string]runview.Run{}
	for _, d := range b.Dates {
		r, err := led.Run(ctx, d.Run())
		if err != nil {
			return nil, nil, fmt.Errorf("backfill %s, %s: %w", b.ID, d.Value, err)
		}
		shards, err := led.Shards(ctx, r.ID)
		if err != nil {
			return nil, nil, fmt.Errorf("backfill %s, %s: %w", b.ID, d.Value, err)
		}
		runs[r.ID] = r
		views[r.ID] = runview.FromAt(r, shards, now)
	}
	return runs, views, nil
}

// Status reads backfill id with its values' current runs.
func Status(ctx context.Context, led Ledger, id string, now time.Time) (View, map[string]jobs.Run, error) {
	b, err := led.Backfill(ctx, id)
	if err != nil {
		return View{}, nil, err
	}
	runs, views, err := Runs(ctx, led, b, now)
	if err != nil {
		return View{}, nil, err
	}
	return viewOf(b, runs, views, now), runs, nil
}

// ViewOf is the view of b from records already read: its values' current
// runs by id and their shards by run id (a ledger snapshot).
func ViewOf(b ledger.Backfill, runs map[string]jobs.Run, shards map[string][]jobs.Shard, now time.Time) View {
	views := map[string]runview.Run{}
	for _, d := range b.Dates {
		if r, ok := runs[d.Run()]; ok {
			views[r.ID] = runview.FromAt(r, shards[r.ID], now)
		}
	}
	return viewOf(b, runs, views, now)
}

func viewOf(b ledger.Backfill, runs map[string]jobs.Run, views map[string]runview.Run, now time.Time) View {
	state := ledger.BackfillState(b, runs)
	v := View{Param: b.Param, From: b.From, To: b.To, Step: b.Step, Parallel: b.Parallel, Dates: []Date{}}
	v.ID, v.Job, v.State, v.Pool, v.Priority = b.ID, b.Job, string(state), b.Pool, b.Priority
	v.CreatedAt = b.CreatedAt.UTC().Format(time.RFC3339)
	v.Backfill = b.ID
	var last time.Time
	for _, d := range b.Dates {
		rv := views[d.Run()]
		r := runs[d.Run()]
		v.Dates = append(v.Dates, Date{Value: d.Value, Run: d.Run(), State: rv.State, RowsDone: rv.RowsDone, RowsTotal: rv.RowsTotal,
			Rejected: rv.Rejected, DurationS: rv.DurationS, Error: rv.Error, Attempts: len(d.Runs)})
		v.RowsDone += rv.RowsDone
		v.RowsTotal += rv.RowsTotal
		v.RowsOut += rv.RowsOut
		v.Rejected += rv.Rejected
		v.Shards.Pending += rv.Shards.Pending
		v.Shards.Running += rv.Shards.Running
		v.Shards.Committed += rv.Shards.Committed
		v.Shards.Failed += rv.Shards.Failed
		v.Shards.Cancelled += rv.Shards.Cancelled
		if v.Error == "" && rv.State == string(jobs.RunFailed) {
			v.Error = d.Value + ": " + rv.Error
		}
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
	}
	end := now
	if state.Terminal() {
		end = last
		v.FinishedAt = last.UTC().Format(time.RFC3339)
	}
	if d := end.Sub(b.CreatedAt); d > 0 {
		v.DurationS = d.Round(time.Millisecond).Seconds()
		v.RowsPerS = float64(v.RowsDone) / d.Seconds()
	}
	if !state.Terminal() && v.RowsPerS > 0 && v.RowsTotal > v.RowsDone {
		v.ETAS = (float64(v.RowsTotal-v.RowsDone) / v.RowsPerS)
	}
	return v
}

// Table writes v for people: the totals, then one line per value.
func (v View) Table(w io.Writer) error {
	fmt.Fprintf(w, "backfill %s  job %s  %s=%s..%s step %s  parallel %d\n", v.ID, v.Job, v.Param, v.From, v.To, v.Step, v.Parallel)
	fmt.Fprintf(w, "state %s  rows %d/%d  rejected %d  %s rows/s", v.State, v.RowsDone, v.RowsTotal, v.Rejected, runview.Human(int64(v.RowsPerS)))
	if v.ETAS > 0 {
		fmt.Fprintf(w, "  eta %s", runview.Duration(time.Duration(v.ETAS*float64(time.Second))))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VALUE\tSTATE\tROWS\tREJECTED\tDURATION\tRUN\tERROR")
	for _, d := range v.Dates {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\n", d.Value, d.State, d.RowsDone, d.RowsTotal, d.Rejected,
			runview.Duration(time.Duration(d.DurationS*float64(time.Second))), d.Run, d.Error)
	}
	return tw.Flush()
}
