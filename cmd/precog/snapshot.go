package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner/backfill"
)

// The embedded ledger is one file that the state dir's processes share,
// one transaction at a time; a process frozen inside a transaction would
// leave `precog runs` and `status` from another process only "ledger
// busy" once bolt.LockWait passed. A running local backfill therefore
// writes a snapshot of what they show into the state dir (a temporary file
// renamed over the last one, so a reader never sees half of it), every
// second and after each claim, commit and state change; the read-only
// commands fall back to it when the ledger is busy, saying how old it is.

// snapshotFile is the snapshot's name in the state dir.
const snapshotFile = "ledger-snapshot.json"

// snapshotRuns bounds the runs a snapshot holds besides its backfills'.
const snapshotRuns = 50

// ledgerSnapshot is what a snapshot file holds.
type ledgerSnapshot struct {
	WrittenAt time.Time `json:"written_at"`
	// PID wrote it: the process holding the ledger.
	PID int `json:"pid"`
	// Runs are the newest runs and every run of Backfills, newest first,
	// with their shards by run id.
	Runs      []runview.Run           `json:"runs"`
	Shards    map[string][]jobs.Shard `json:"shards"`
	Backfills []backfill.View         `json:"backfills"`
}

// snapshotLedger is what a snapshot reads.
type snapshotLedger interface {
	ledger.Ledger
	ledger.Backfills
}

// takeSnapshot reads the snapshot's content from led.
func takeSnapshot(ctx context.Context, led snapshotLedger, dir string, now time.Time) (ledgerSnapshot, error) {
	s := ledgerSnapshot{WrittenAt: now, PID: os.Getpid(), Shards: map[string][]jobs.Shard{}}
	bfs, err := led.Backfills(ctx, "", 10)
	if err != nil {
		return s, err
	}
	runs, err := led.Runs(ctx, "", snapshotRuns)
	if err != nil {
		return s, err
	}
	seen := map[string]bool{}
	for _, r := range runs {
		seen[r.ID] = true
	}
	for _, b := range bfs {
		v, _, err := backfill.Status(ctx, led, b.ID, now)
		if err != nil {
			return s, err
		}
		s.Backfills = append(s.Backfills, v)
		for _, d := range b.Dates {
			for _, id := range d.Runs {
				if seen[id] {
					continue
				}
				r, err := led.Run(ctx, id)
				if err != nil {
					return s, err
				}
				seen[id] = true
				runs = append(runs, r)
			}
		}
	}
	for _, r := range runs {
		shards, err := led.Shards(ctx, r.ID)
		if err != nil {
			return s, err
		}
		v := localView(dir, r, shards, runview.FromAt(r, shards, now), now)
		if id, _, err := led.BackfillOf(ctx, r.ID); err == nil {
			v.Backfill = id
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return s, err
		}
		s.Runs = append(s.Runs, v)
		s.Shards[r.ID] = shards
	}
	sortRunViews(s.Runs)
	return s, nil
}

// sortRunViews orders runs newest first (RFC 3339 in UTC sorts as text).
func sortRunViews(runs []runview.Run) {
	slices.SortStableFunc(runs, func(a, b runview.Run) int { return strings.Compare(b.CreatedAt, a.CreatedAt) })
}

// writeSnapshot writes s into dir atomically (temporary file, rename).
func writeSnapshot(dir string, s ledgerSnapshot) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, snapshotFile+".tmp*")
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, snapshotFile)); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// snapshotter writes snapshots of a ledger this process holds.
type snapshotter struct {
	led  snapshotLedger
	dir  string
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startSnapshots writes a snapshot of led into dir now, every second and
// after each kick (at most every 100ms), until the returned stop, which
// writes a last one.
func startSnapshots(ctx context.Context, led snapshotLedger, dir string, log *slog.Logger) *snapshotter {
	s := &snapshotter{led: led, dir: dir, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	ctx = context.WithoutCancel(ctx)
	s.write(ctx)
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-s.stop:
				s.write(ctx)
				return
			case <-tick.C:
			case <-s.kick:
				if wait := 100*time.Millisecond - time.Since(last); wait > 0 {
					select {
					case <-time.After(wait):
					case <-s.stop:
						s.write(ctx)
						return
					}
				}
			}
			s.write(ctx)
			last = time.Now()
		}
	}()
	return s
}

func (s *snapshotter) write(ctx context.Context) {
	snap, err := takeSnapshot(ctx, s.led, s.dir, time.Now().UTC())
	if err == nil {
		err = writeSnapshot(s.dir, snap)
	}
	if err != nil {
		s.log.Debug("ledger snapshot not written", "err", err)
	}
}

// Kick asks for a snapshot soon (the ledger changed).
func (s *snapshotter) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Stop writes a last snapshot and ends the writer.
func (s *snapshotter) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// kickingLedger is a backfill ledger that kicks the snapshotter after
// each change a reader sees: a claim, a commit, a failure, a state.
type kickingLedger struct {
	ledger.Store
	s *snapshotter
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

// readSnapshot returns the snapshot of stateDir when the process that
// wrote it is alive; ok false otherwise. The ledger is shared by the state
// dir's processes (bolt opens it per transaction), so a reader falls back
// to it only when a transaction held the file past bolt.LockWait (a
// process frozen inside one).
func readSnapshot(stateDir string) (ledgerSnapshot, bool) {
	var s ledgerSnapshot
	b, err := os.ReadFile(filepath.Join(stateDir, snapshotFile))
	if err != nil || json.Unmarshal(b, &s) != nil {
		return s, false
	}
	if s.PID <= 0 || syscall.Kill(s.PID, 0) != nil {
		return s, false
	}
	return s, true
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
