package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// The embedded ledger keeps a snapshot of what `precog runs` and `status`
// show while a local backfill holds it (ledger.Snapshots, written by the
// ledger); the read-only commands fall back to it when the ledger is busy,
// saying how old it is. This file turns it into their views.

// ledgerSnapshot is a snapshot as the commands show it.
type ledgerSnapshot struct {
	WrittenAt time.Time
	// PID wrote it: the process holding the ledger.
	PID int
	// Runs are the newest runs and every run of Backfills, newest first,
	// with their shards by run id.
	Runs      []runview.Run
	Shards    map[string][]jobs.Shard
	Backfills []backfill.View
}

// viewSnapshot makes the views of s as of when it was written: each run's
// (interrupted when its process is gone) and each backfill's.
func viewSnapshot(dir string, s ledger.Snapshot) ledgerSnapshot {
	now := s.WrittenAt
	out := ledgerSnapshot{WrittenAt: s.WrittenAt, PID: s.PID, Shards: s.Shards}
	byID := map[string]jobs.Run{}
	for _, r := range s.Runs {
		byID[r.ID] = r
		shards := s.Shards[r.ID]
		v := runner.LocalView(dir, r, shards, runview.FromAt(r, shards, now), now)
		v.Backfill = s.BackfillOf[r.ID]
		out.Runs = append(out.Runs, v)
	}
	for _, b := range s.Backfills {
		out.Backfills = append(out.Backfills, backfill.ViewOf(b, byID, s.Shards, now))
	}
	sortRunViews(out.Runs)
	return out
}

// sortRunViews orders runs newest first (RFC 3339 in UTC sorts as text).
func sortRunViews(runs []runview.Run) {
	slices.SortStableFunc(runs, func(a, b runview.Run) int { return strings.Compare(b.CreatedAt, a.CreatedAt) })
}

// startSnapshots has led keep its snapshot while this process holds it.
// A ledger that keeps none (Postgres) needs none: its Kick and Stop do
// nothing.
func startSnapshots(ctx context.Context, led ledger.Store, log *slog.Logger) ledger.Snapshotter {
	s, err := led.KeepSnapshots(ctx, log)
	if err != nil {
		if !errors.Is(err, ledger.ErrUnsupported) {
			log.Warn("ledger snapshots not kept", "err", err)
		}
		return noSnapshots{}
	}
	return s
}

// noSnapshots is the Snapshotter of a ledger that keeps none.
type noSnapshots struct{}

func (noSnapshots) Kick() {}
func (noSnapshots) Stop() {}

// kickingLedger is a backfill ledger that kicks the snapshotter after
// each change a reader sees: a claim, a commit, a failure, a state.
type kickingLedger struct {
	ledger.Store
	s ledger.Snapshotter
}

// ClaimPublish kicks too: runner's local publish takes the publish lease
// (so that a cancel from another process is refused while the sinks cut
// over), and the run shows as publishing.
func (k kickingLedger) ClaimPublish(ctx context.Context, p ledger.PublishLeaseParams) (jobs.Run, error) {
	r, err := k.Store.ClaimPublish(ctx, p)
	k.s.Kick()
	return r, err
}

func (k kickingLedger) Claim(ctx context.Context, runID, worker string, lease time.Duration) (jobs.Shard, error) {
	sh, err := k.Store.Claim(ctx, runID, worker, lease)
	k.s.Kick()
	return sh, err
}

func (k kickingLedger) Complete(ctx context.Context, p ledger.CompleteParams) error {
	err := k.Store.Complete(ctx, p)
	k.s.Kick()
	return err
}

func (k kickingLedger) Fail(ctx context.Context, p ledger.FailParams) error {
	err := k.Store.Fail(ctx, p)
	k.s.Kick()
	return err
}

func (k kickingLedger) SetRunState(ctx context.Context, runID string, state jobs.RunState, msg string) error {
	err := k.Store.SetRunState(ctx, runID, state, msg)
	k.s.Kick()
	return err
}

// readSnapshot returns the snapshot of stateDir's ledger when the process
// that wrote it is alive; ok false otherwise. The ledger is shared by the
// state dir's processes (bolt opens it per transaction), so a reader falls
// back to it only when a transaction held the file past bolt.LockWait (a
// process frozen inside one).
func readSnapshot(stateDir string) (ledgerSnapshot, bool) {
	s, ok := open.ReadSnapshot(open.Location{StateDir: stateDir})
	if !ok {
		return ledgerSnapshot{}, false
	}
	return viewSnapshot(stateDir, s), true
}

// snapshotFallback returns the snapshot a read-only command shows when
// opening the embedded ledger failed with err because a running process
// holds it, after telling w (stderr) that the view is a snapshot and how
// old. ok false: err stands.
func snapshotFallback(g *globals, db string, err error, w io.Writer) (ledgerSnapshot, bool) {
	if !errors.Is(err, ledger.ErrBusy) || databaseURL(db) != "" {
		return ledgerSnapshot{}, false
	}
	s, ok := readSnapshot(g.stateDir)
	if ok {
		fmt.Fprintf(w, "note: the ledger is held by running precog process %d; this is its snapshot from %s ago\n",
			s.PID, time.Since(s.WrittenAt).Round(100*time.Millisecond))
	}
	return s, ok
}

// snapshotRunsList is `precog runs` from a snapshot, filtered as the
// flags ask (job, backfill, limit <= 0 for all).
func snapshotRunsList(s ledgerSnapshot, job, bfID string, limit int) ([]runview.Run, error) {
	out := []runview.Run{}
	if bfID != "" {
		found := false
		for _, b := range s.Backfills {
			found = found || b.ID == bfID
		}
		if !found {
			return nil, invalid(fmt.Errorf("backfill %s: not found in the snapshot of the running process", bfID))
		}
	}
	for _, r := range s.Runs {
		if (job != "" && r.Job != job) || (bfID != "" && r.Backfill != bfID) {
			continue
		}
		if bfID == "" && limit > 0 && len(out) == limit {
			break
		}
		out = append(out, r)
	}
	return out, nil
}

// printSnapshotStatus is `precog status ID` from a snapshot: a backfill's
// per-date table or a run's detail (JSON as from the ledger, without the
// reject sample, which the snapshot does not hold).
func printSnapshotStatus(s ledgerSnapshot, id string, w io.Writer, asJSON bool) error {
	for _, b := range s.Backfills {
		if b.ID == id {
			if asJSON {
				return json.NewEncoder(w).Encode(b)
			}
			return b.Table(w)
		}
	}
	for _, r := range s.Runs {
		if r.ID == id {
			if asJSON {
				return json.NewEncoder(w).Encode(runview.StatusOf(r, nil))
			}
			return runview.Detail{Run: r, Shards: s.Shards[id]}.Write(w)
		}
	}
	return invalid(fmt.Errorf("run %s: not in the snapshot of the running process (it holds the ledger; retry when it ends)", id))
}

// printSnapshotRuns prints `precog runs` from a snapshot.
func printSnapshotRuns(cmd *cobra.Command, s ledgerSnapshot, job, bfID string, limit int, asJSON bool) error {
	runs, err := snapshotRunsList(s, job, bfID, limit)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(runs)
	}
	return runview.Table(cmd.OutOrStdout(), runs)
}
