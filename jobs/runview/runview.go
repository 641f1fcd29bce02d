// Package runview is the machine-readable form of a run that `precog runs
// --json` and `precog status RUN --json` print (contract 3 of docs/contracts.md),
// and the table the same commands print for people. One place, so the
// embedded and the cluster ledgers answer in exactly the same shape.
package runview

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/profile"
)

// ShardCounts are a run's shards by state, as they stand: a cancelled
// run's shards that the cancel stopped (the ledger records them failed
// with the cancel's reason), and a failed run's shards that never finished
// (pending or running in the ledger, but nothing runs them), are counted
// as Cancelled, not as failed, pending or running.
type ShardCounts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Committed int `json:"committed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// All is the number of shards.
func (c ShardCounts) All() int { return c.Pending + c.Running + c.Committed + c.Failed + c.Cancelled }

// count adds shard s of run r to c.
func (c *ShardCounts) count(r jobs.Run, s jobs.Shard) {
	switch {
	case s.State == jobs.ShardCommitted:
		c.Committed++
	case r.State == jobs.RunCancelled && (s.State != jobs.ShardFailed || s.Error == r.Error):
		c.Cancelled++ // ended by the cancel (failed with its reason), or left open by an older precog
	case r.State == jobs.RunFailed && (s.State == jobs.ShardPending || s.State == jobs.ShardRunning):
		c.Cancelled++ // the run's failure stopped them
	case s.State == jobs.ShardPending:
		c.Pending++
	case s.State == jobs.ShardRunning:
		c.Running++
	case s.State == jobs.ShardFailed:
		c.Failed++
	}
}

// Run is one run as scripts see it.
type Run struct {
	ID           string            `json:"id"`
	Job          string            `json:"job"`
	State        string            `json:"state"`
	Version      string            `json:"version"`
	Pool         string            `json:"pool"`
	Priority     int               `json:"priority"`
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
	// DurationS is the seconds from created to finished (or to now while
	// the run is open); RowsPerS is RowsDone over it.
	DurationS float64 `json:"duration_s"`
	RowsPerS  float64 `json:"rows_per_s"`
	// Backfill is the id of the backfill the run belongs to ("" for none).
	Backfill string `json:"backfill,omitempty"`
	// Cost is what its committed shards used (absent before any recorded
	// one).
	Cost *Cost `json:"cost,omitempty"`
	// Resume is the command that resumes an interrupted run ("" for
	// other states).
	Resume string `json:"resume,omitempty"`
	// StagedKeptUntil (RFC 3339) is when a failed cluster run's staged
	// data, kept for retry.keep_failed, is removed: precog retry before
	// then resumes the run. StagedRemoved: it was removed, and a retry
	// recomputes the shards its sinks lost. Neither for other runs.
	StagedKeptUntil string `json:"staged_kept_until,omitempty"`
	StagedRemoved   bool   `json:"staged_removed,omitempty"`
}

// RetryNote says what became of a failed cluster run's staged data and so
// what precog retry does with the run, as precog status and the
// dashboard's run page show it ("" for other runs).
func (r Run) RetryNote() string {
	switch {
	case r.StagedKeptUntil != "":
		return fmt.Sprintf("staged data kept until %s; precog retry %s resumes the run (committed shards are not recomputed)", r.StagedKeptUntil, r.ID)
	case r.StagedRemoved:
		return fmt.Sprintf("staged data removed; precog retry %s recomputes the shards its sinks lost", r.ID)
	}
	return ""
}

// StateInterrupted is the state shown for a local run whose process is
// gone (killed, crashed, stopped): the ledger still says running, but
// nothing executes it until the same command resumes it. Never stored.
const StateInterrupted = "interrupted"

// Interrupted is v shown as an interrupted run that resume resumes: no
// rate, and its running shards (their holder is gone) counted as pending.
func (v Run) Interrupted(resume string) Run {
	v.State = StateInterrupted
	v.RowsPerS = 0
	v.Resume = resume
	v.Shards.Pending += v.Shards.Running
	v.Shards.Running = 0
	return v
}

// DefaultRejectSample is how many sampled rejected rows `status` reads.
const DefaultRejectSample = 20

// Status is one run as `precog status RUN --json` prints it: the Run object
// with the same fields, plus a sample of its rejected rows ([] when none):
// objects with shard, key, position (file and row) and reason, by shard then
// position, from the ledger, so they show wherever the shards ran.
type Status struct {
	Run
	RejectSample []jobs.Reject `json:"reject_sample"`
	// Checks are the run's checks before its publish (absent when its
	// spec has none or they did not run yet).
	Checks []profile.Check `json:"checks,omitempty"`
	// Holders are the workers holding the run's running shards, with their
	// heartbeat ages (absent when none holds any): the "workers" line of
	// the text view.
	Holders []Holder `json:"holders,omitempty"`
	// CannotRun lists the live workers that cannot execute the run, with
	// why (UnableFor; absent when none): a run that waits with no worker
	// able to run it says so.
	CannotRun []string `json:"cannot_run,omitempty"`
}

// StatusOf is the status view of v with its reject sample (nil reads as
// none).
func StatusOf(v Run, sample []jobs.Reject) Status {
	if sample == nil {
		sample = []jobs.Reject{}
	}
	return Status{Run: v, RejectSample: sample}
}

// ETA is the time left at rate rows per second (0 when unknown or done).
func (v Run) ETA(rate float64) time.Duration {
	if rate <= 0 || v.RowsDone >= v.RowsTotal || v.FinishedAt != "" {
		return 0
	}
	return time.Duration(float64(v.RowsTotal-v.RowsDone) / rate * float64(time.Second))
}

// From builds the view of r with its shards, now.
func From(r jobs.Run, shards []jobs.Shard) Run { return FromAt(r, shards, time.Now()) }

// FromAt builds the view of r with its shards at time now (which ends the
// duration of an open run).
func FromAt(r jobs.Run, shards []jobs.Shard, now time.Time) Run {
	pool := jobs.PoolOrDefault(r.Pool)
	v := Run{ID: r.ID, Job: r.Job, State: publicState(r.State), Version: r.Version, ModelVersion: r.ModelVersion,
		Pool: pool, Priority: r.Priority,
		Params: r.Params, RowsDone: r.Counts.RowsIn, RowsOut: r.Counts.RowsOut, Rejected: r.Counts.Rejected,
		ScheduledFor: r.Params["scheduled_for"], CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339),
		// An error may quote a spec value (a DSN): never its password.
		Error: jobs.RedactSecrets(r.Error)}
	for _, s := range shards {
		v.RowsTotal += s.EstRows
		v.Shards.count(r, s)
	}
	v.Cost = costOf(shards)
	if r.State.Terminal() {
		v.FinishedAt = r.UpdatedAt.UTC().Format(time.RFC3339)
	}
	if d := RunDuration(r, now); d > 0 {
		v.DurationS = d.Round(time.Millisecond).Seconds()
		v.RowsPerS = float64(v.RowsDone) / d.Seconds()
	}
	return v
}

// RunDuration is how long run r has taken at now: from its creation to
// its end (its last update once terminal), or to now while it is open; 0
// when unknown. The one duration every view of a run shows: status, runs,
// the dashboard, a backfill's per-value table and the summary precog
// backfill prints (a value queued behind others counts its wait).
func RunDuration(r jobs.Run, now time.Time) time.Duration {
	if r.CreatedAt.IsZero() {
		return 0
	}
	end := now
	if r.State.Terminal() {
		end = r.UpdatedAt
	}
	return max(end.Sub(r.CreatedAt), 0)
}

// PublicStates are the states a run's view can show, in lifecycle order:
// jobs.RunStates as the contract names them (publishing reads as
// running), then StateInterrupted. The dashboard's state filter offers
// these.
func PublicStates() []string {
	var out []string
	for _, s := range jobs.RunStates() {
		if p := publicState(s); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return append(out, StateInterrupted)
}

// publicState maps the ledger's states onto the contract's: a run that is
// publishing is still running (interrupted is set by Interrupted).
func publicState(s jobs.RunState) string {
	if s == jobs.RunPublishing {
		return string(jobs.RunRunning)
	}
	return string(s)
}

// Table writes runs as an aligned table for people, or says there are
// none yet.
func Table(w io.Writer, runs []Run) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no runs yet")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tJOB\tSTATE\tPROGRESS\tROWS/S\tDURATION\tSHARDS (done/failed/all)\tREJECTED\tCREATED\tERROR")
	for _, r := range runs {
		all := r.Shards.All()
		progress := "-"
		if r.RowsTotal > 0 {
			progress = fmt.Sprintf("%.0f%%", 100*float64(min(r.RowsDone, r.RowsTotal))/float64(r.RowsTotal))
		}
		rate := Human(int64(r.RowsPerS))
		if r.State == StateInterrupted {
			rate = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%d\t%s\t%s\n", r.ID, r.Job, r.State, progress,
			rate, Duration(time.Duration(r.DurationS*float64(time.Second))), r.Shards.Committed, r.Shards.Failed, all, r.Rejected, r.CreatedAt, oneLine(r.Error, 60))
	}
	return tw.Flush()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n - 1
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}

// Human writes a count short: 950, 12k, 1.5M, 12M.
func Human(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Duration writes d to the second (to the millisecond under a second);
// "-" for none.
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
