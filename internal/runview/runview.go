// Package runview is the machine-readable form of a run that `precog runs
// --json` and `precog status RUN --json` print (contract 3 of DESIGN.md),
// and the table the same commands print for people. One place, so the
// embedded and the cluster ledgers answer in exactly the same shape.
package runview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// ShardCounts are a run's shards by state.
type ShardCounts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Committed int `json:"committed"`
	Failed    int `json:"failed"`
}

// Run is one run as scripts see it.
type Run struct {
	ID           string            `json:"id"`
	Job          string            `json:"job"`
	State        string            `json:"state"`
	Version      string            `json:"version"`
	ModelVersion string            `json:"model_version"`
	Params       map[string]string `json:"params,omitempty"`
	RowsDone     int64             `json:"rows_done"`
	RowsTotal    int64             `json:"rows_total"`
	RowsOut      int64             `json:"rows_out"`
	Rejected     int64             `json:"rejected"`
	Shards       ShardCounts       `json:"shards"`
	// ScheduledFor is the cron tick (RFC 3339), "" for manual runs.
	ScheduledFor string `json:"scheduled_for"`
	CreatedAt    string `json:"created_at"`
	// FinishedAt is set once the run is terminal ("" before).
	FinishedAt string `json:"finished_at"`
	Error      string `json:"error"`
}

// From builds the view of r with its shards.
func From(r jobs.Run, shards []jobs.Shard) Run {
	v := Run{ID: r.ID, Job: r.Job, State: publicState(r.State), Version: r.Version, ModelVersion: r.ModelVersion,
		Params: r.Params, RowsDone: r.Counts.RowsIn, RowsOut: r.Counts.RowsOut, Rejected: r.Counts.Rejected,
		ScheduledFor: r.Params["scheduled_for"], CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339), Error: r.Error}
	for _, s := range shards {
		v.RowsTotal += s.EstRows
		switch s.State {
		case jobs.ShardPending:
			v.Shards.Pending++
		case jobs.ShardRunning:
			v.Shards.Running++
		case jobs.ShardCommitted:
			v.Shards.Committed++
		case jobs.ShardFailed:
			v.Shards.Failed++
		}
	}
	if r.State.Terminal() {
		v.FinishedAt = r.UpdatedAt.UTC().Format(time.RFC3339)
	}
	return v
}

// publicState maps the ledger's states onto the contract's five: a run
// that is publishing is still running.
func publicState(s jobs.RunState) string {
	if s == jobs.RunPublishing {
		return string(jobs.RunRunning)
	}
	return string(s)
}

// Table writes runs as an aligned table for people.
func Table(w io.Writer, runs []Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tJOB\tSTATE\tPROGRESS\tSHARDS (done/failed/all)\tREJECTED\tCREATED\tERROR")
	for _, r := range runs {
		all := r.Shards.Pending + r.Shards.Running + r.Shards.Committed + r.Shards.Failed
		progress := "-"
		if r.RowsTotal > 0 {
			progress = fmt.Sprintf("%.0f%%", 100*float64(min(r.RowsDone, r.RowsTotal))/float64(r.RowsTotal))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d/%d\t%d\t%s\t%s\n", r.ID, r.Job, r.State, progress,
			r.Shards.Committed, r.Shards.Failed, all, r.Rejected, r.CreatedAt, oneLine(r.Error, 60))
	}
	return tw.Flush()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
