package runner

import (
	"context"
	"errors"
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
		return v, nil
	}
	return LocalView(stateDir, r, shards, v, now), nil
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
