package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
)

// WaitParams is the run WaitRun follows and who hears of it.
type WaitParams struct {
	Ledger ledger.RunReader
	RunID  string
	// OnProgress gets each poll as precog run's progress bar draws it.
	OnProgress func(Progress)
	// OnError is told of a failed read of the ledger (tolerated and
	// retried, as ledger.Follow does).
	OnError func(error)
}

// WaitRun follows a run of the Postgres ledger until it is terminal
// (ledger.Follow's poll) and ends as a local run does: the run's view and
// nil when it succeeded, RunFailure (naming the failed shards) when it
// failed or was cancelled, ctx's error when ctx ends (the run keeps going
// on the workers). precog submit --wait, retry --wait and run --db wait
// with it.
func WaitRun(ctx context.Context, p WaitParams) (runview.Run, error) {
	start := time.Now()
	var last ledger.RunSnapshot
	r, err := ledger.Follow(ctx, p.Ledger, p.RunID, ledger.FollowOptions{
		OnPoll: func(s ledger.RunSnapshot) {
			last = s
			if p.OnProgress != nil {
				p.OnProgress(SnapshotProgress(s, start))
			}
		},
		OnError: p.OnError,
	})
	if err != nil {
		return runview.Run{}, err
	}
	v := runview.From(r, last.Shards)
	if r.State != jobs.RunSucceeded {
		return v, RunFailure(r, last.Shards)
	}
	return v, nil
}

// WatchFormat is how WatchRun shows each poll.
type WatchFormat int

const (
	// WatchLines prints one line per change, for logs.
	WatchLines WatchFormat = iota
	// WatchJSON prints one runview.Status object per change.
	WatchJSON
	// WatchRedraw redraws the detail view in place on a terminal.
	WatchRedraw
)

// WatchParams is the run WatchRun follows and how it shows it.
type WatchParams struct {
	Ledger ledger.Ledger
	RunID  string
	Out    io.Writer
	Format WatchFormat
	// Every is the poll interval (default 1s).
	Every time.Duration
}

// WatchRun follows a run until it is terminal (precog status RUN
// --watch), showing it on Out in Format; a change is anything but the
// fields that move with the clock alone. A run that did not succeed is an
// error (exit 1).
func WatchRun(ctx context.Context, p WatchParams) error {
	if p.Every <= 0 {
		p.Every = time.Second
	}
	last := ""
	r, err := ledger.Follow(ctx, p.Ledger, p.RunID, ledger.FollowOptions{
		Every: p.Every,
		OnPoll: func(s ledger.RunSnapshot) {
			v := runview.FromAt(s.Run, s.Shards, s.At)
			if p.Format != WatchRedraw && !changed(&last, v) {
				return
			}
			switch p.Format {
			case WatchJSON:
				// A failed read shows no sample this once; the next
				// change reads it again.
				sample, _ := RejectSample(ctx, p.Ledger, v)
				b, _ := json.Marshal(runview.StatusOf(v, sample))
				fmt.Fprintln(p.Out, string(b))
			case WatchRedraw:
				sample, _ := RejectSample(ctx, p.Ledger, v) // as above
				var b strings.Builder
				_ = runview.Detail{Run: v, Shards: s.Shards, Rate: s.Rate, Rejects: sample}.Write(&b)
				fmt.Fprint(p.Out, "\033[H\033[2J"+b.String())
			default:
				fmt.Fprintln(p.Out, WatchLine(v, s.Rate, time.Now()))
			}
		},
	})
	if err != nil {
		return err
	}
	if r.State != jobs.RunSucceeded {
		return fmt.Errorf("run %s %s: %s", r.ID, r.State, r.Error)
	}
	return nil
}

// changed reports whether v differs from the view last shown, but for
// the fields that change with the clock alone, and remembers it.
func changed(last *string, v runview.Run) bool {
	v.DurationS, v.RowsPerS = 0, 0
	b, _ := json.Marshal(v)
	if *last == string(b) {
		return false
	}
	*last = string(b)
	return true
}

// WatchLine is one line of a run's progress for logs, at now; rate is the
// recent rows/s (0: the run's average).
func WatchLine(v runview.Run, rate float64, now time.Time) string {
	if rate <= 0 {
		rate = v.RowsPerS
	}
	line := fmt.Sprintf("%s %s rows %d/%d shards committed=%d running=%d pending=%d failed=%d cancelled=%d rows/s=%s",
		now.UTC().Format(time.RFC3339), v.State, v.RowsDone, v.RowsTotal,
		v.Shards.Committed, v.Shards.Running, v.Shards.Pending, v.Shards.Failed, v.Shards.Cancelled, runview.Human(int64(rate)))
	if eta := v.ETA(rate); eta > 0 {
		line += " eta=" + runview.Duration(eta)
	}
	if v.Error != "" {
		line += " error=" + fmt.Sprintf("%q", v.Error)
	}
	return line
}
