package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
)

// RunView is run r as precog runs and precog status show it: its view at
// now, with the backfill it belongs to, and,
// for a run of the embedded ledger under stateDir ("" for the Postgres
// ledger), shown interrupted with the command that resumes it when the
// process executing it is gone (the ledger still says running, and
// nothing runs it).
func RunView(ctx context.Context, led ledger.Store, stateDir string, r jobs.Run, shards []jobs.Shard, now time.Time) (runview.Run, error) {
	v := runview.FromAt(r, shards, now)
	id, _, err := led.BackfillOf(ctx, v.ID)
	switch {
	case err == nil:
		v.Backfill = id
	case !errors.Is(err, ledger.ErrNotFound):
		return v, err
	}
	if stateDir == "" {
		return StagedView(ctx, led, r, v)
	}
	return LocalView(stateDir, r, shards, v, now), nil
}

// StagedView is v with what became of failed cluster run r's staged data:
// kept until its pending cleanup is due, or removed (none pending; every
// failed cluster run's sinks are aborted, at once or after
// retry.keep_failed). A ledger without cleanups tells nothing. Also the
// dashboard's run page.
func StagedView(ctx context.Context, led ledger.Cleanups, r jobs.Run, v runview.Run) (runview.Run, error) {
	if r.State != jobs.RunFailed {
		return v, nil
	}
	c, err := led.PendingCleanup(ctx, r.ID)
	switch {
	case err == nil:
		v.StagedKeptUntil = c.DueAt.UTC().Format(time.RFC3339)
	case errors.Is(err, ledger.ErrNotFound):
		v.StagedRemoved = true
	case !errors.Is(err, ledger.ErrUnsupported):
		return v, err
	}
	return v, nil
}

// LocalView is v, the view of an embedded-ledger run, shown interrupted
// (with the command that resumes it) when the process executing it is
// gone.
func LocalView(stateDir string, r jobs.Run, shards []jobs.Shard, v runview.Run, now time.Time) runview.Run {
	gone, h, ok := LocalRunGone(stateDir, r, shards, now)
	if !gone {
		return v
	}
	resume := h.Command
	if !ok || resume == "" {
		args := []string{"run", r.SpecFile}
		if stateDir != ".precog" {
			args = append([]string{"--state-dir", stateDir}, args...)
		}
		resume = CommandLine(r.Params, args...)
	}
	return v.Interrupted(resume)
}

// SnapshotProgress is a followed run (ledger.Follow) as precog run's
// progress bar draws it, start being when the following began.
func SnapshotProgress(s ledger.RunSnapshot, start time.Time) Progress {
	p := Progress{RunID: s.Run.ID, RowsDone: s.Run.Counts.RowsIn, ShardsTotal: len(s.Shards),
		Rejected: s.Run.Counts.Rejected, Elapsed: time.Since(start), Rate: s.Rate}
	for _, sh := range s.Shards {
		p.RowsTotal += sh.EstRows
		if sh.State == jobs.ShardCommitted {
			p.ShardsDone++
		}
	}
	if p.Rate > 0 && p.RowsTotal > p.RowsDone {
		p.ETA = time.Duration(float64(p.RowsTotal-p.RowsDone) / p.Rate * float64(time.Second))
	}
	return p
}

// RunFailure is the error of a run that ended without succeeding: its
// error and the first failed shards' errors.
func RunFailure(r jobs.Run, shards []jobs.Shard) error {
	var b strings.Builder
	switch {
	case strings.HasPrefix(r.Error, "run "+r.ID+" "+string(r.State)):
		// It says so itself ("run … held by its checks: …", as precog run
		// says it).
		b.WriteString(r.Error)
	case r.Error != "":
		fmt.Fprintf(&b, "run %s %s: %s", r.ID, r.State, r.Error)
	default:
		fmt.Fprintf(&b, "run %s %s", r.ID, r.State)
	}
	n := 0
	for _, s := range shards {
		if s.State != jobs.ShardFailed {
			continue
		}
		if n == runview.DefaultMaxFailed {
			fmt.Fprintf(&b, "\n  … more failed shards: precog status %s", r.ID)
			break
		}
		fmt.Fprintf(&b, "\n  shard %d (%d attempts): %s", s.Index, s.Attempts, s.Error)
		n++
	}
	return errors.New(b.String())
}

// StillHeld drops from each lost worker's list of shards (its last
// heartbeat's) those it no longer holds: committed, failed, taken over by
// another worker, or of a finished run. A live worker's list is its own
// (it heartbeats what it holds).
func StillHeld(ctx context.Context, led ledger.Ledger, ws []ledger.WorkerInfo) ([]ledger.WorkerInfo, error) {
	shardsOf := map[string][]jobs.Shard{}
	for i, w := range ws {
		if !w.Lost || len(w.Current) == 0 {
			continue
		}
		var kept []ledger.ShardRef
		for _, c := range w.Current {
			shards, ok := shardsOf[c.Run]
			if !ok {
				var err error
				shards, err = led.Shards(ctx, c.Run)
				if err != nil && !errors.Is(err, ledger.ErrNotFound) {
					return nil, fmt.Errorf("shards of run %s: %w", c.Run, err)
				}
				shardsOf[c.Run] = shards
			}
			for _, s := range shards {
				if s.Index == c.Shard && s.State == jobs.ShardRunning && ledger.WorkerOf(s.Worker) == w.ID {
					kept = append(kept, c)
				}
			}
		}
		ws[i].Current = kept
	}
	return ws, nil
}
