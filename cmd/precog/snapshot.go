package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner/backfill"
)

// The embedded ledger keeps a snapshot of what `precog runs` and `status`
// show while a local backfill holds it (backfill.Snapshot); the read-only
// commands fall back to it when the ledger is busy, saying how old it is.

// snapshotFallback returns the snapshot a read-only command shows when
// opening the embedded ledger failed with err because a running process
// holds it, after telling w (stderr) that the view is a snapshot and how
// old. ok false: err stands.
func snapshotFallback(g *globals, db string, err error, w io.Writer) (backfill.Snapshot, bool) {
	if !errors.Is(err, ledger.ErrBusy) || databaseURL(db) != "" {
		return backfill.Snapshot{}, false
	}
	s, ok := backfill.ReadSnapshot(g.stateDir)
	if ok {
		fmt.Fprintf(w, "note: the ledger is held by running precog process %d; this is its snapshot from %s ago\n",
			s.PID, time.Since(s.WrittenAt).Round(100*time.Millisecond))
	}
	return s, ok
}

// printSnapshotStatus is `precog status ID` from a snapshot: a backfill's
// per-date table or a run's detail (JSON as from the ledger, without the
// reject sample, which the snapshot does not hold).
func printSnapshotStatus(s backfill.Snapshot, id string, w io.Writer, asJSON bool) error {
	if b, ok := s.Backfill(id); ok && asJSON {
		return json.NewEncoder(w).Encode(b)
	} else if ok {
		return b.Table(w)
	}
	if r, ok := s.Run(id); ok && asJSON {
		return json.NewEncoder(w).Encode(runview.StatusOf(r, nil))
	} else if ok {
		return runview.Detail{Run: r, Shards: s.Shards[id]}.Write(w)
	}
	return invalid(fmt.Errorf("run %s: not in the snapshot of the running process (it holds the ledger; retry when it ends)", id))
}

// printSnapshotRuns prints `precog runs` from a snapshot.
func printSnapshotRuns(cmd *cobra.Command, s backfill.Snapshot, job, bfID string, limit int, asJSON bool) error {
	runs, err := s.RunsOf(job, bfID, limit)
	if errors.Is(err, ledger.ErrNotFound) {
		return invalid(err)
	} else if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(runs)
	}
	return runview.Table(cmd.OutOrStdout(), runs)
}
