// Package ledger is the durable record of runs and shards: the unit of resume
// on one machine and of coordination across workers. Implementations: an
// embedded bbolt database (ledger/bolt) for `precog run`, Postgres
// (ledger/postgres) for the cluster; both pass ledgertest.Exercise.
package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFound: no such run or shard.
	ErrNotFound = errors.New("not found")
	// ErrNoShard: nothing claimable right now (all committed, leased or failed).
	ErrNoShard = errors.New("no claimable shard")
	// ErrLeaseLost: the shard's lease expired and another worker may own it;
	// the caller must abandon its attempt without committing.
	ErrLeaseLost = errors.New("shard lease lost")
	// ErrRunFinished: the run is terminal (succeeded, failed or cancelled).
	ErrRunFinished = errors.New("run finished")
	// ErrBusy: the ledger is held by another process (the embedded ledger
	// admits one); retry later.
	ErrBusy = errors.New("ledger busy")
)

// Ledger records runs and shards. Every method is safe for concurrent use.
type Ledger interface {
	// CreateRun stores a new run in state pending with its planned shards
	// (each pending, Attempts 0). run.ID must be unique.
	CreateRun(ctx context.Context, run jobs.Run, shards []jobs.Shard) error
	// OpenRun returns the newest non-terminal run of (job, paramsKey), or
	// ErrNotFound: how `precog run` finds the run to resume.
	OpenRun(ctx context.Context, job, paramsKey string) (jobs.Run, error)
	// Run returns one run.
	Run(ctx context.Context, id string) (jobs.Run, error)
	// Runs lists runs, newest first; job "" means all jobs; limit <= 0 means all.
	Runs(ctx context.Context, job string, limit int) ([]jobs.Run, error)
	// Shards returns a run's shards ordered by index.
	Shards(ctx context.Context, runID string) ([]jobs.Shard, error)

	// Claim leases one pending shard of the run (or a running one whose lease
	// expired) to worker until now+lease, incrementing Attempts and moving
	// the run from pending to running. ErrNoShard when none is claimable;
	// ErrRunFinished when the run is terminal.
	Claim(ctx context.Context, runID, worker string, lease time.Duration) (jobs.Shard, error)
	// Heartbeat extends the lease; ErrLeaseLost if worker no longer holds it.
	Heartbeat(ctx context.Context, runID string, shard int, worker string, lease time.Duration) error
	// Complete marks the shard committed with its counts, adding them to the
	// run's; ErrLeaseLost if worker no longer holds it.
	Complete(ctx context.Context, runID string, shard int, worker string, counts jobs.Counts) error
	// Fail records an attempt's error. The shard goes back to pending when
	// retry is true and attempts remain (< maxAttempts), else to failed.
	Fail(ctx context.Context, runID string, shard int, worker string, msg string, retry bool, maxAttempts int) error
	// Release returns a leased shard to pending without counting the attempt
	// (graceful drain on SIGTERM / Ctrl-C).
	Release(ctx context.Context, runID string, shard int, worker string) error

	// RetryFailed moves the run's failed shards back to pending with their
	// attempt counts reset, so re-running the same command retries only what
	// failed instead of starting over. Returns how many shards it moved.
	RetryFailed(ctx context.Context, runID string) (int, error)

	// Reopen moves committed shards of a non-terminal run back to pending
	// (attempts reset, counts taken off the run's), recording reason: a
	// sink found at stage time that it lost them, and they are recomputed
	// instead of published around. A run in publishing goes back to running.
	Reopen(ctx context.Context, runID string, shards []int, reason string) error

	// SetRunState moves a run to state with an optional error message.
	// Moving a terminal run is ErrRunFinished.
	SetRunState(ctx context.Context, runID string, state jobs.RunState, msg string) error

	Close() error
}
