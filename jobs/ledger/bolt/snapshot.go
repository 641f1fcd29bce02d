package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// SnapshotFile is the snapshot's name in the state dir (ledger.Snapshot).
const SnapshotFile = "ledger-snapshot.json"

// SnapshotFormat is the version of the snapshot file's layout, bumped at
// each change: a reader takes only its own (an older precog's snapshot,
// met during an upgrade, reads as none rather than misread). 1 was the
// unversioned file of views; 2 holds the raw records of ledger.Snapshot.
const SnapshotFormat = 2

// snapshotFile is the snapshot file's content: ledger.Snapshot with its
// format.
type snapshotFile struct {
	Format int `json:"format"`
	ledger.Snapshot
}

// snapshotRuns and snapshotBackfills bound what a snapshot holds: the
// newest runs and backfills (and every run of those backfills).
const (
	snapshotRuns      = 50
	snapshotBackfills = 10
)

// takeSnapshot reads the snapshot's content.
func (l *Ledger) takeSnapshot(ctx context.Context, now time.Time) (ledger.Snapshot, error) {
	s := ledger.Snapshot{WrittenAt: now, PID: os.Getpid(), Shards: map[string][]jobs.Shard{}, BackfillOf: map[string]string{}}
	bfs, err := l.Backfills(ctx, "", snapshotBackfills)
	if err != nil {
		return s, err
	}
	runs, err := l.Runs(ctx, "", snapshotRuns)
	if err != nil {
		return s, err
	}
	seen := map[string]bool{}
	for _, r := range runs {
		seen[r.ID] = true
	}
	for _, b := range bfs {
		for _, d := range b.Dates {
			for _, id := range d.Runs {
				if seen[id] {
					continue
				}
				r, err := l.Run(ctx, id)
				if err != nil {
					return s, err
				}
				seen[id] = true
				runs = append(runs, r)
			}
		}
	}
	for _, r := range runs {
		shards, err := l.Shards(ctx, r.ID)
		if err != nil {
			return s, err
		}
		s.Shards[r.ID] = shards
		if id, _, err := l.BackfillOf(ctx, r.ID); err == nil {
			s.BackfillOf[r.ID] = id
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return s, err
		}
	}
	slices.SortStableFunc(runs, func(a, b jobs.Run) int { return b.CreatedAt.Compare(a.CreatedAt) })
	s.Runs, s.Backfills = runs, bfs
	return s, nil
}

// writeSnapshot writes s beside the ledger's file atomically (a temporary
// file renamed over the last one, so a reader never sees half of it).
func (l *Ledger) writeSnapshot(s ledger.Snapshot) error {
	b, err := json.Marshal(snapshotFile{Format: SnapshotFormat, Snapshot: s})
	if err != nil {
		return err
	}
	dir := filepath.Dir(l.db.path)
	tmp, err := os.CreateTemp(dir, SnapshotFile+".tmp*")
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
	if err := os.Rename(tmp.Name(), filepath.Join(dir, SnapshotFile)); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// ReadSnapshot returns the snapshot in stateDir when the process that
// wrote it is alive; ok false otherwise (none, unreadable, of another
// SnapshotFormat, or its writer ended: then the ledger itself is free
// again).
func ReadSnapshot(stateDir string) (ledger.Snapshot, bool) {
	var f snapshotFile
	b, err := os.ReadFile(filepath.Join(stateDir, SnapshotFile))
	if err != nil || json.Unmarshal(b, &f) != nil || f.Format != SnapshotFormat {
		return ledger.Snapshot{}, false
	}
	if f.PID <= 0 || syscall.Kill(f.PID, 0) != nil {
		return ledger.Snapshot{}, false
	}
	return f.Snapshot, true
}

// snapshotter writes snapshots of a ledger this process holds.
type snapshotter struct {
	l      *Ledger
	log    *slog.Logger
	period time.Duration
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// KeepSnapshots implements ledger.Snapshots: a snapshot now, every second
// and after each Kick (at most every 100ms), until Stop writes a last one.
// Every write transaction of this process on the ledger's file kicks it
// (a claim, a commit, a failure, a state), whatever Ledger value it went
// through, so the snapshot follows the ledger by itself.
func (l *Ledger) KeepSnapshots(ctx context.Context, log *slog.Logger) (ledger.Snapshotter, error) {
	return l.keepSnapshots(ctx, log, time.Second), nil
}

// keepSnapshots is KeepSnapshots writing one every period besides kicks.
func (l *Ledger) keepSnapshots(ctx context.Context, log *slog.Logger, period time.Duration) *snapshotter {
	s := &snapshotter{l: l, log: log, period: period, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	ctx = context.WithoutCancel(ctx)
	s.write(ctx)
	l.db.file.snap.Store(s)
	go s.loop(ctx)
	return s
}

func (s *snapshotter) loop(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.period)
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
}

func (s *snapshotter) write(ctx context.Context) {
	snap, err := s.l.takeSnapshot(ctx, time.Now().UTC())
	if err == nil {
		err = s.l.writeSnapshot(snap)
	}
	if err != nil {
		s.log.Debug("ledger snapshot not written", "err", err)
	}
}

// Kick implements ledger.Snapshotter.
func (s *snapshotter) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Stop implements ledger.Snapshotter.
func (s *snapshotter) Stop() {
	s.once.Do(func() {
		s.l.db.file.snap.CompareAndSwap(s, nil)
		close(s.stop)
	})
	<-s.done
}
