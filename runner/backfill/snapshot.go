package backfill

import (
	"fmt"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
)

// Snapshot is the snapshot a live process keeps of the embedded ledger it
// holds (ledger.Snapshot) as precog runs, status, the backfill watch and
// the dashboard show it when they find that ledger busy: each run's view
// (interrupted when its process is gone) and each backfill's, as of when
// it was written.
type Snapshot struct {
	WrittenAt time.Time
	// PID wrote it: the process holding the ledger.
	PID int
	// Runs are the newest runs and every run of Backfills, newest first,
	// with their shards by run id.
	Runs      []runview.Run
	Shards    map[string][]jobs.Shard
	Backfills []View
}

// ViewSnapshot makes the views of s, a snapshot of stateDir's ledger.
func ViewSnapshot(stateDir string, s ledger.Snapshot) Snapshot {
	at := s.WrittenAt
	out := Snapshot{WrittenAt: s.WrittenAt, PID: s.PID, Shards: s.Shards}
	byID := map[string]jobs.Run{}
	for _, r := range s.Runs {
		byID[r.ID] = r
		shards := s.Shards[r.ID]
		v := runner.LocalView(stateDir, r, shards, runview.FromAt(r, shards, at), at)
		v.Backfill = s.BackfillOf[r.ID]
		out.Runs = append(out.Runs, v)
	}
	for _, b := range s.Backfills {
		out.Backfills = append(out.Backfills, ViewOf(b, byID, s.Shards, at))
	}
	return out
}

// ReadSnapshot returns the views of the snapshot of stateDir's embedded
// ledger while the process that keeps it lives; ok false otherwise. The
// ledger is shared by the state dir's processes (one transaction at a
// time), so a reader falls back to it only when a transaction held the
// file past bolt.LockWait (a process frozen inside one).
func ReadSnapshot(stateDir string) (Snapshot, bool) {
	s, ok := open.ReadSnapshot(open.Location{StateDir: stateDir})
	if !ok {
		return Snapshot{}, false
	}
	return ViewSnapshot(stateDir, s), true
}

// RunsOf lists s's runs as precog runs does: of job ("" any), or every run
// of backfill bf ("" none in particular), at most limit when bf is ""
// (<= 0: all). A bf that s does not hold is ledger.ErrNotFound.
func (s Snapshot) RunsOf(job, bf string, limit int) ([]runview.Run, error) {
	if _, ok := s.Backfill(bf); bf != "" && !ok {
		return nil, fmt.Errorf("backfill %s: %w in the snapshot of the running process", bf, ledger.ErrNotFound)
	}
	out := []runview.Run{}
	for _, r := range s.Runs {
		if (job != "" && r.Job != job) || (bf != "" && r.Backfill != bf) {
			continue
		}
		if bf == "" && limit > 0 && len(out) == limit {
			break
		}
		out = append(out, r)
	}
	return out, nil
}

// Backfill returns backfill id's view in s.
func (s Snapshot) Backfill(id string) (View, bool) {
	for _, b := range s.Backfills {
		if b.ID == id {
			return b, true
		}
	}
	return View{}, false
}

// Run returns run id's view in s.
func (s Snapshot) Run(id string) (runview.Run, bool) {
	for _, r := range s.Runs {
		if r.ID == id {
			return r, true
		}
	}
	return runview.Run{}, false
}
