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
	"github.com/precog-ml/precog/jobs/ledger"
)

// DefaultMaxFailed is how many failed shards' errors a detail view lists.
const DefaultMaxFailed = 5

// DefaultMaxRejects is how many sampled rejected rows a detail view lists.
const DefaultMaxRejects = 5

// Detail is one run as `precog status RUN` shows it to people: progress
// with rate and ETA, shards by state, the workers holding shards, the
// failed shards' errors and the run's error.
type Detail struct {
	Run    Run
	Shards []jobs.Shard
	// Rate is the rows per second to show (a recent rate while watching);
	// <= 0 shows the run's average since it was created.
	Rate float64
	// MaxFailed bounds the failed shards listed (default DefaultMaxFailed).
	MaxFailed int
	// Rejects is the run's reject sample (Ledger.RejectSample), listed
	// under the rows line; MaxRejects bounds how many (default
	// DefaultMaxRejects).
	Rejects    []jobs.Reject
	MaxRejects int
	// Workers is the ledger's list of workers (ledger.Workers), when it
	// has one: each holder is shown with its heartbeat age, and a lost
	// holder's leases as expiring.
	Workers []ledger.WorkerInfo
}

// Write writes the detail view as aligned "label  value" lines.
func (d Detail) Write(w io.Writer) error {
	r := d.Run
	rate := d.Rate
	if rate <= 0 {
		rate = r.RowsPerS
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", r.ID)
	fmt.Fprintf(tw, "job\t%s%s\n", r.Job, paramsSuffix(r.Params))
	if r.State == StateInterrupted {
		fmt.Fprintf(tw, "state\t%s (the process running it is gone; the same command resumes it)\n", r.State)
	} else {
		fmt.Fprintf(tw, "state\t%s (pool %s, priority %d)\n", r.State, r.Pool, r.Priority)
	}
	progress := "-"
	if r.RowsTotal > 0 {
		progress = fmt.Sprintf("%.1f%%", 100*float64(min(r.RowsDone, r.RowsTotal))/float64(r.RowsTotal))
	}
	line := fmt.Sprintf("%s  %s/%s rows", progress, Human(r.RowsDone), Human(r.RowsTotal))
	interrupted := r.State == StateInterrupted
	if !interrupted { // nothing moves an interrupted run: no rate, no ETA
		line += fmt.Sprintf("  %s rows/s", Human(int64(rate)))
		if eta := r.ETA(rate); eta > 0 {
			line += "  ETA " + Duration(eta)
		}
	}
	fmt.Fprintf(tw, "progress\t%s\n", line)
	if interrupted {
		fmt.Fprintf(tw, "resume\t%s\n", r.Resume)
	}
	shards := fmt.Sprintf("%d committed, %d running, %d pending, %d failed", r.Shards.Committed, r.Shards.Running, r.Shards.Pending, r.Shards.Failed)
	if r.Shards.Cancelled > 0 {
		shards += fmt.Sprintf(", %d cancelled", r.Shards.Cancelled)
	}
	fmt.Fprintf(tw, "shards\t%s (of %d)\n", shards, r.Shards.All())
	if ws := workers(d.Shards, d.Workers); ws != "" && !interrupted {
		fmt.Fprintf(tw, "workers\t%s\n", ws)
	}
	for _, u := range UnableFor(r.ID, d.Workers) {
		fmt.Fprintf(tw, "cannot run\t%s\n", u)
	}
	fmt.Fprintf(tw, "rows\t%d in, %d out, %d rejected\n", r.RowsDone, r.RowsOut, r.Rejected)
	d.writeRejects(tw)
	if r.Cost != nil {
		fmt.Fprintf(tw, "cost\t%s\n", r.Cost.Text())
	}
	fmt.Fprintf(tw, "created\t%s (%s)\n", r.CreatedAt, Duration(time.Duration(r.DurationS*float64(time.Second))))
	if r.FinishedAt != "" {
		fmt.Fprintf(tw, "finished\t%s\n", r.FinishedAt)
	}
	if r.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", oneLine(r.Error, 300))
	}
	if note := r.RetryNote(); note != "" {
		fmt.Fprintf(tw, "retry\t%s\n", note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return d.writeFailed(w)
}

// writeRejects lists the first sampled rejects under the rows line: the
// shard, where (file and row), why, and the key; then how many more there
// are and where all of them are.
func (d Detail) writeRejects(w io.Writer) {
	r := d.Run
	if r.Rejected == 0 && len(d.Rejects) == 0 {
		return
	}
	files := fmt.Sprintf("precog rejects %s lists every stored one", r.ID)
	if len(d.Rejects) == 0 {
		fmt.Fprintf(w, "rejects\tno sample in the ledger: %s\n", files)
		return
	}
	limit := d.MaxRejects
	if limit <= 0 {
		limit = DefaultMaxRejects
	}
	shown := min(len(d.Rejects), limit)
	label := "rejects"
	for _, rj := range d.Rejects[:shown] {
		key := oneLine(rj.Key, 60)
		if key == "" {
			key = `""`
		}
		fmt.Fprintf(w, "%s\tshard %d, %s: %s (key %s)\n", label, rj.Shard, tail(rj.Position, 120), oneLine(rj.Reason, 120), key)
		label = ""
	}
	if more := max(r.Rejected, int64(len(d.Rejects))) - int64(shown); more > 0 {
		fmt.Fprintf(w, "\t… %d more: %s\n", more, files)
	}
}

// tail is s on one line, cut to its last n bytes: a long position keeps
// its file name and row.
func tail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := len(s) - (n - 1)
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "…" + s[cut:]
}

// writeFailed lists the first failed shards with their errors.
func (d Detail) writeFailed(w io.Writer) error {
	limit := d.MaxFailed
	if limit <= 0 {
		limit = DefaultMaxFailed
	}
	var failed []jobs.Shard
	for _, s := range d.Shards {
		if s.State == jobs.ShardFailed && !(d.Run.State == string(jobs.RunCancelled) && s.Error == d.Run.Error) {
			failed = append(failed, s)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	fmt.Fprintf(w, "failed shards:\n")
	for i, s := range failed {
		if i == limit {
			fmt.Fprintf(w, "  … %d more\n", len(failed)-limit)
			break
		}
		fmt.Fprintf(w, "  shard %d (%d attempts): %s\n", s.Index, s.Attempts, oneLine(jobs.RedactSecrets(s.Error), 200))
	}
	return nil
}

// Holder is a worker claim loop holding running shards of a run, with
// its heartbeat as the ledger's list of workers has it: what `status`
// prints after "workers" and `status --json` lists under "holders".
type Holder struct {
	// Worker is the lease holder's name (worker id/device).
	Worker string `json:"worker"`
	// Shards is how many of the run's running shards it holds.
	Shards int `json:"shards"`
	// State is "up", "lost" (no heartbeat for one lease: its leases are
	// expiring), "not registered" (the list lacks it), or "" when the
	// ledger lists no workers.
	State string `json:"state,omitempty"`
	// HeartbeatAgeS is the seconds since its last heartbeat (by the
	// ledger's clock); absent when unknown.
	HeartbeatAgeS *float64 `json:"heartbeat_age_s,omitempty"`
}

// HoldersOf lists who holds the running shards, by name, with each
// holder's heartbeat from list (the ledger's workers; nil when the ledger
// has no list).
func HoldersOf(shards []jobs.Shard, list []ledger.WorkerInfo) []Holder {
	held := map[string]int{}
	for _, s := range shards {
		if s.State == jobs.ShardRunning && s.Worker != "" {
			held[s.Worker]++
		}
	}
	byID := map[string]ledger.WorkerInfo{}
	for _, w := range list {
		byID[w.ID] = w
	}
	out := make([]Holder, 0, len(held))
	for n, k := range held {
		h := Holder{Worker: n, Shards: k}
		if list != nil {
			switch w, ok := byID[ledger.WorkerOf(n)]; {
			case !ok:
				h.State = "not registered"
			default:
				h.State = "up"
				if w.Lost {
					h.State = "lost"
				}
				age := w.HeartbeatAge.Seconds()
				h.HeartbeatAgeS = &age
			}
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b Holder) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

// workers lists who holds running shards: "host-a-12/cpu (2)", with each
// holder's heartbeat age when the ledger lists workers: "host-a-12/cpu (2)
// [heartbeat 3s ago]", "host-b-7/cpu (1) [LOST: no heartbeat for 41s, its
// leases expiring]", or "[not registered]" for a holder the list lacks.
func workers(shards []jobs.Shard, list []ledger.WorkerInfo) string {
	hs := HoldersOf(shards, list)
	names := make([]string, len(hs))
	for i, h := range hs {
		beat := ""
		switch h.State {
		case "not registered":
			beat = " [not registered]"
		case "lost":
			beat = fmt.Sprintf(" [LOST: no heartbeat for %s, its leases expiring]", Duration(time.Duration(*h.HeartbeatAgeS*float64(time.Second))))
		case "up":
			beat = fmt.Sprintf(" [heartbeat %s ago]", Duration(max(time.Duration(*h.HeartbeatAgeS*float64(time.Second)), time.Millisecond)))
		}
		names[i] = fmt.Sprintf("%s (%d)%s", h.Worker, h.Shards, beat)
	}
	return strings.Join(names, ", ")
}

func paramsSuffix(params map[string]string) string {
	if len(params) == 0 {
		return ""
	}
	return " (params " + jobs.ParamsKey(params) + ")"
}
