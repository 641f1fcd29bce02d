package ledger

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// ProcessName is this process's name as a ledger worker or lease holder
// when none is given: host-pid, so that operators find the process a
// lease names (a worker's claim loops hold leases as name/device).
func ProcessName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// WorkerInfo is one `precog worker` process as it last reported itself to
// the ledger, so that operators see which workers are up, in which pool,
// on which devices and version, and what each holds.
type WorkerInfo struct {
	// ID is the worker's name (host-pid by default); its claim loops hold
	// leases as ID/device.
	ID      string   `json:"id"`
	Pool    string   `json:"pool"`
	Devices []string `json:"devices"`
	// Version is the worker binary's version.
	Version string `json:"version"`
	// ModelCache describes the models the worker keeps loaded (model
	// versions), "" when none.
	ModelCache string `json:"model_cache"`
	// Lease is the worker's shard lease: a worker that has not heartbeated
	// for this long is lost, and its shards' leases are expiring.
	Lease time.Duration `json:"-"`
	// Current lists the shards the worker holds.
	Current []ShardRef `json:"current"`
	// Unable lists the runs this worker found it cannot execute (their
	// spec or model does not load here) and passes over; other workers of
	// the pool run them.
	Unable []Unable `json:"unable,omitempty"`
	// Set by the ledger when read: StartedAt (first heartbeat),
	// HeartbeatAt, HeartbeatAge (by the ledger's clock) and Lost (no
	// heartbeat for one Lease).
	StartedAt    time.Time     `json:"started_at"`
	HeartbeatAt  time.Time     `json:"heartbeat_at"`
	HeartbeatAge time.Duration `json:"-"`
	Lost         bool          `json:"lost"`
}

// State is "up", or "lost": no heartbeat for one Lease, so its shards'
// leases are expiring and other workers of the pool take them over.
func (w WorkerInfo) State() string {
	if w.Lost {
		return "lost"
	}
	return "up"
}

// Unattended reports whether no worker of pool has heartbeated within its
// lease (none registered, or every one lost), so that a run submitted
// there waits with no one to run it; lost counts the pool's lost workers.
func Unattended(ctx context.Context, l Workers, pool string) (unattended bool, lost int, err error) {
	ws, err := l.ListWorkers(ctx, pool)
	if err != nil {
		return false, 0, fmt.Errorf("list workers: %w", err)
	}
	for _, w := range ws {
		if !w.Lost {
			return false, lost, nil
		}
		lost++
	}
	return true, lost, nil
}

// ShardRef names one shard a worker holds, and the device running it.
type ShardRef struct {
	Run    string `json:"run"`
	Shard  int    `json:"shard"`
	Device string `json:"device,omitempty"`
}

// Unable is a run a worker cannot execute, and why.
type Unable struct {
	Run    string `json:"run"`
	Job    string `json:"job"`
	Reason string `json:"reason"`
	// Since is when the worker first failed to load it.
	Since time.Time `json:"since"`
}

// HolderName is the lease holder name of a worker's claim loop slot
// (from 0) on device: "host-pid/cpu" for the first, "host-pid/cpu#2" for
// the second, so that every loop's leases, and its bars on the run's
// timeline, are its own.
func HolderName(worker, device string, slot int) string {
	if slot == 0 {
		return worker + "/" + device
	}
	return fmt.Sprintf("%s/%s#%d", worker, device, slot+1)
}

// WorkerOf is the worker that owns a claim loop's lease holder name
// ("host-pid/cpu" or "host-pid/cpu#2" → "host-pid").
func WorkerOf(holder string) string {
	for i := len(holder) - 1; i >= 0; i-- {
		if holder[i] == '/' {
			return holder[:i]
		}
	}
	return holder
}

// WorkerForget is how long a lost worker stays listed before the ledger
// forgets it.
const WorkerForget = 24 * time.Hour

// Workers is the ledger's list of worker processes. Workers heartbeat it
// (the first heartbeat registers) and remove themselves on a clean stop; a
// killed worker stays listed, lost, until WorkerForget.
type Workers interface {
	// HeartbeatWorker records w (all fields but the ledger's own) as seen
	// now, registering it on its first call.
	HeartbeatWorker(ctx context.Context, w WorkerInfo) error
	// RemoveWorker forgets worker id (a clean stop); no error when unknown.
	RemoveWorker(ctx context.Context, id string) error
	// ListWorkers lists the workers of pool ("" for all), by pool then id.
	ListWorkers(ctx context.Context, pool string) ([]WorkerInfo, error)
}

// DefaultRejectsPerRun bounds the rejected rows a ledger stores per run
// (Rejects): past it, rows are still counted (the run's Rejected count and
// max_rejected_fraction stay exact) but not stored.
const DefaultRejectsPerRun = 100_000

// RejectPage is one page of a run's stored rejected rows.
type RejectPage struct {
	Rows []jobs.Reject `json:"rows"`
	// Stored is how many rejected rows the ledger holds for the run's
	// committed shards; fewer than the run's Rejected count when the run
	// went past Cap.
	Stored int64 `json:"stored"`
	Cap    int   `json:"cap"`
}

// Rejects is the ledger's store of every rejected row of a run, in one
// place whatever machine ran each shard. Complete stores the rejects it is
// given (all of the attempt's, not only a sample) with the commit, fenced
// by the same lease, replacing an earlier attempt's, up to the ledger's
// per-run cap (DefaultRejectsPerRun unless configured); the shards
// committed first fill it.
type Rejects interface {
	// Rejects returns the stored rejects of the run's committed shards by
	// shard then position, skipping offset, at most limit (<= 0: all).
	// ErrNotFound for an unknown run.
	Rejects(ctx context.Context, runID string, offset, limit int) (RejectPage, error)
}
