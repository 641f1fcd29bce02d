package ledger

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// Snapshot is what a ledger held by one process shows the others while
// they cannot open it: its newest runs and backfills with their shards,
// as recorded at WrittenAt by process PID. The embedded ledger is one
// file that the state dir's processes share one transaction at a time;
// one frozen inside a transaction would leave `precog runs` and `status`
// from another process only ErrBusy, so a process running a local
// backfill keeps a snapshot and the read-only commands fall back to it.
type Snapshot struct {
	WrittenAt time.Time `json:"written_at"`
	// PID wrote it: the process holding the ledger.
	PID int `json:"pid"`
	// Runs are the newest runs and every run of Backfills, newest first.
	Runs []jobs.Run `json:"runs"`
	// Shards are each run's shards by run id.
	Shards    map[string][]jobs.Shard `json:"shards"`
	Backfills []Backfill              `json:"backfills"`
	// BackfillOf is the backfill each run of a backfill belongs to.
	BackfillOf map[string]string `json:"backfill_of"`
}

// Snapshotter keeps a ledger's snapshot fresh until Stop.
type Snapshotter interface {
	// Kick asks for a snapshot soon (the ledger changed).
	Kick()
	// Stop writes a last snapshot and ends the writer.
	Stop()
}

// Snapshots is a ledger that keeps snapshots for readers that cannot
// open it (the embedded ledger). The Postgres ledger's readers never wait
// on a writer: its KeepSnapshots is ErrUnsupported.
type Snapshots interface {
	// KeepSnapshots writes a snapshot now, every second and soon after
	// each Kick, until Stop writes a last one. Write failures go to log.
	KeepSnapshots(ctx context.Context, log *slog.Logger) (Snapshotter, error)
}

// StartSnapshots has l keep its snapshot (KeepSnapshots) while this
// process holds it, e.g. for a local backfill; a ledger that keeps none
// (Postgres) needs none, and a failure to start is logged: the Snapshotter
// returned then does nothing.
func StartSnapshots(ctx context.Context, l Snapshots, log *slog.Logger) Snapshotter {
	s, err := l.KeepSnapshots(ctx, log)
	if err != nil {
		if !errors.Is(err, ErrUnsupported) {
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
