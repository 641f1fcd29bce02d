// Package ledger is the durable record of runs and shards: the unit of resume
// on one machine and of coordination across workers. Implementations: an
// embedded bbolt database (ledger/bolt) for `precog run`, Postgres
// (ledger/postgres) for the cluster; both pass ledgertest.Exercise.
package ledger

import (
	"context"
	"errors"
	"fmt"
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
	// ErrRunOpen: CreateRun of a run whose (job, params) already has a
	// non-terminal run. The error is an *OpenRunError naming that run.
	ErrRunOpen = errors.New("run already open")
	// ErrPublishing: the run is in a worker's publish step (it holds the
	// run's publish lease, live or lapsed), and cancelling it now could
	// leave some sinks on its version and others on the previous one. The
	// publish finishes (or a worker takes it over and finishes it) in
	// seconds; cancel, rollback and a scheduler's replace wait for it.
	ErrPublishing = errors.New("run is publishing")
	// ErrUnsupported: this ledger does not do what was asked (the embedded
	// ledger does not reopen a failed run: `precog run` makes a new one).
	// Nothing changed.
	ErrUnsupported = errors.New("not supported by this ledger")
)

// OpenRunError says which run is still open when CreateRun is refused, so
// that `submit` can point at it (resume it, wait for it or cancel it).
type OpenRunError struct {
	Job, ParamsKey string
	// RunID is the open run; State its state.
	RunID string
	State jobs.RunState
}

func (e *OpenRunError) Error() string {
	return fmt.Sprintf("job %s (params %q) already has run %s open (%s): resume, wait for or cancel it first", e.Job, e.ParamsKey, e.RunID, e.State)
}

// Unwrap makes errors.Is(err, ErrRunOpen) hold.
func (e *OpenRunError) Unwrap() error { return ErrRunOpen }

// StragglerFactor: ClaimNext leases a running shard to a second worker when
// the run has nothing pending and the shard has run longer than this many
// times the run's median committed shard time.
const StragglerFactor = 3

// DefaultPool is the pool of a run with none recorded.
const DefaultPool = jobs.DefaultPool

// HeartbeatParams extend a worker's lease on a shard (Ledger.Heartbeat).
type HeartbeatParams struct {
	RunID  string
	Shard  int
	Worker string
	// Lease is how long the shard stays leased from now.
	Lease time.Duration
}

// CompleteParams commit a shard (Ledger.Complete): fenced by the worker's
// lease, so a worker whose lease was taken over changes nothing.
type CompleteParams struct {
	RunID  string
	Shard  int
	Worker string
	// Counts are the attempt's row counts, added to the run's.
	Counts jobs.Counts
	// Sample is the attempt's first rejected rows: stored with the commit,
	// fenced by the same lease, capped by jobs.CapSample, and replacing
	// (never adding to) the sample of an earlier attempt of the shard.
	Sample []jobs.Reject
	// Profile is the shard's encoded output profile (the spec's checks:),
	// stored in the same commit, replacing an earlier attempt's; "" when
	// the spec has no checks.
	Profile string
	// Cost is what the attempt used (CPU and GPU time), stored with the
	// shard, replacing an earlier attempt's.
	Cost jobs.Cost
}

// FailParams record a failed attempt (Ledger.Fail).
type FailParams struct {
	RunID  string
	Shard  int
	Worker string
	// Msg is the attempt's error, shown by status.
	Msg string
	// Retry sends the shard back to pending while attempts remain.
	Retry bool
	// MaxAttempts is the spec's retry.max_attempts.
	MaxAttempts int
}

// ReleaseParams return a leased shard to pending (Ledger.Release).
type ReleaseParams struct {
	RunID  string
	Shard  int
	Worker string
}

// ClaimNextParams lease the best claimable shard of a pool
// (Cluster.ClaimNext).
type ClaimNextParams struct {
	Pool   string
	Worker string
	// Lease is how long the shard stays leased from now.
	Lease time.Duration
	// Skip are runs passed over: those the worker found it cannot execute
	// (a spec it cannot load here), so that it serves the pool's other
	// runs meanwhile.
	Skip []string
}

// PublishLeaseParams take or extend a run's publish lease
// (Cluster.ClaimPublish, Cluster.HeartbeatPublish).
type PublishLeaseParams struct {
	RunID  string
	Worker string
	// Lease is how long the publish step stays leased from now.
	Lease time.Duration
}

// FinishPublishParams end a run's publish step (Cluster.FinishPublish),
// fenced by Worker's publish lease.
type FinishPublishParams struct {
	RunID  string
	Worker string
	// State is terminal: succeeded, or failed / cancelled / held with Msg.
	State jobs.RunState
	Msg   string
}

// Ledger records runs and shards. Every method is safe for concurrent use.
type Ledger interface {
	// CreateRun stores a new run in state pending with its planned shards
	// (each pending, Attempts 0). run.ID must be unique, and (job, params
	// key) must have no open run: else an *OpenRunError (ErrRunOpen).
	CreateRun(ctx context.Context, run jobs.Run, shards []jobs.Shard) error
	// OpenRun returns the newest non-terminal run of (job, paramsKey), or
	// ErrNotFound: how `precog run` finds the run to resume.
	OpenRun(ctx context.Context, job, paramsKey string) (jobs.Run, error)
	// Run returns one run.
	Run(ctx context.Context, id string) (jobs.Run, error)
	// Runs lists runs, newest first; job "" means all jobs; limit <= 0 means all.
	Runs(ctx context.Context, job string, limit int) ([]jobs.Run, error)
	// JobNames lists every job that has a run in the ledger, by name (the
	// dashboard's jobs page).
	JobNames(ctx context.Context) ([]string, error)
	// Shards returns a run's shards ordered by index.
	Shards(ctx context.Context, runID string) ([]jobs.Shard, error)
	// RejectSample returns the rejected-row samples of a run's committed
	// shards, ordered by shard then position, at most limit (<= 0: all):
	// what `status` shows of rejects that live in reject files on whatever
	// machine ran each shard. ErrNotFound for an unknown run.
	RejectSample(ctx context.Context, runID string, limit int) ([]jobs.Reject, error)

	// Claim leases one pending shard of the run (or a running one whose lease
	// expired) to worker until now+lease, incrementing Attempts and moving
	// the run from pending to running. ErrNoShard when none is claimable;
	// ErrRunFinished when the run is terminal.
	Claim(ctx context.Context, runID, worker string, lease time.Duration) (jobs.Shard, error)
	// Heartbeat extends the lease; ErrLeaseLost if worker no longer holds it
	// (also when the run was cancelled or failed: then the error is
	// ErrRunFinished as well, and the attempt must stop).
	//
	// Fencing: a lease is (run, shard, worker), so every claim loop uses a
	// unique worker name. Heartbeat, Complete, Fail and Release by a worker
	// without a live lease on the shard return ErrLeaseLost and change
	// nothing.
	Heartbeat(ctx context.Context, p HeartbeatParams) error
	// Complete marks the shard committed with its counts, adding them to the
	// run's; ErrLeaseLost if the worker no longer holds it.
	Complete(ctx context.Context, p CompleteParams) error
	// Fail records an attempt's error. The shard goes back to pending when
	// p.Retry is set and attempts remain (< p.MaxAttempts), else to failed.
	Fail(ctx context.Context, p FailParams) error
	// Release returns a leased shard to pending without counting the attempt
	// (graceful drain on SIGTERM / Ctrl-C).
	Release(ctx context.Context, p ReleaseParams) error

	// RetryFailed moves the run's failed shards back to pending with their
	// attempt counts reset, so re-running the same command retries only what
	// failed instead of starting over. Returns how many shards it moved.
	RetryFailed(ctx context.Context, runID string) (int, error)

	// RetryRun takes a failed run back up (`precog retry` on a cluster):
	// the run goes back to running, its error cleared, its failed shards
	// pending with attempts reset; committed shards are kept. It returns
	// the shards moved. A succeeded or cancelled run is ErrRunFinished;
	// when (job, params) has another open run meanwhile, an *OpenRunError
	// names it. A ledger that cannot is ErrUnsupported, changing nothing.
	RetryRun(ctx context.Context, runID string) (int, error)

	// Reopen moves committed shards of a non-terminal run back to pending
	// (attempts reset, counts taken off the run's), recording reason: a
	// sink found at stage time that it lost them, and they are recomputed
	// instead of published around. A run in publishing goes back to running.
	Reopen(ctx context.Context, runID string, shards []int, reason string) error

	// SetRunState moves a run to state with an optional error message.
	// Moving a terminal run is ErrRunFinished.
	//
	// Cancelling is decided in the transaction that reads the run's state:
	// a run in a cluster publish step (ClaimPublish holds its publish
	// lease) is ErrPublishing and nothing changes; otherwise its open
	// shards (pending, running) become failed with msg in the same
	// transaction, so a cancelled run has no running shard. A running
	// shard keeps its holder's lease mark (Shard.Worker, LeaseUntil) until
	// that holder stops: its Release (or Fail) then clears the mark and
	// still answers ErrRunFinished, so `precog cancel` sees the last
	// holder stop instead of waiting for the lease to run out.
	SetRunState(ctx context.Context, runID string, state jobs.RunState, msg string) error

	Close() error
}

// Cluster is what workers that share runs through one ledger need beyond
// Ledger. The worker loop: wait on Wake (or its own timer), ClaimNext until
// ErrNoShard, execute each shard under Heartbeat, Complete it, then try
// ClaimPublish for its run (the worker that commits the last shard
// publishes); PublishDue finds runs whose publisher died.
type Cluster interface {
	Ledger
	// ClaimNext leases the best claimable shard of any pending or running
	// run in p.Pool but those of p.Skip: highest run priority first, then
	// the run with the fewest running shards (runs of equal priority share
	// the pool), then the oldest run; within a run, an expired lease or the
	// lowest pending index. When nothing is pending it may lease a
	// straggler (see StragglerFactor) to p.Worker as a second, Speculative
	// attempt. ErrNoShard when nothing is claimable.
	ClaimNext(ctx context.Context, p ClaimNextParams) (jobs.Run, jobs.Shard, error)
	// ClaimPublish leases the publish step of a run whose shards are all
	// committed to worker until now+lease, moving it to publishing; a run
	// whose publisher's lease expired is taken over. ErrNoShard when shards
	// are not all committed or another worker holds a live publish lease;
	// ErrRunFinished when the run is terminal.
	ClaimPublish(ctx context.Context, p PublishLeaseParams) (jobs.Run, error)
	// HeartbeatPublish extends the publish lease; ErrLeaseLost when worker
	// no longer holds it.
	HeartbeatPublish(ctx context.Context, p PublishLeaseParams) error
	// FinishPublish ends the publish step in a terminal state (succeeded,
	// or failed / cancelled with msg), fenced by the publish lease:
	// ErrLeaseLost when worker no longer holds it, and nothing changes.
	FinishPublish(ctx context.Context, p FinishPublishParams) error
	// PublishDue lists the ids of pool's open runs whose shards are all
	// committed and whose publish step nobody holds (never claimed, or the
	// publisher's lease expired), highest priority and oldest first.
	PublishDue(ctx context.Context, pool string) ([]string, error)
	// PoolLoad counts pool's work in open runs, for metrics and autoscaling
	// (the same count as the KEDA query in deploy/k8s).
	PoolLoad(ctx context.Context, pool string) (PoolLoad, error)
	// CheckClaim reports whether this process may claim shards, without
	// claiming or locking anything (the Postgres ledger: its role's
	// privileges, a read-only session); a worker's readiness. The error
	// says why not.
	CheckClaim(ctx context.Context) error
	// Wake returns a channel that receives (non-blocking sends, buffer 1)
	// when shards of pool may have become claimable, when a run of pool was
	// cancelled (heartbeat the held shards at once to learn which), and on
	// a periodic poll as a fallback (expired leases, missed notices). It is
	// closed when ctx ends or the ledger closes.
	Wake(ctx context.Context, pool string) <-chan struct{}
}

// PoolLoad is a pool's outstanding work: shards of its open runs waiting
// for a worker (Pending) or leased (Running), and runs being published.
type PoolLoad struct {
	Pending, Running, Publishing int
}

// ErrTickExists: the tick (job, scheduled time) was already recorded, by
// this scheduler or another one that also believed it led.
var ErrTickExists = errors.New("tick already recorded")

// Tick outcomes.
const (
	TickFired   = "fired"   // a run was created
	TickSkipped = "skipped" // concurrency: forbid, the previous run still open
	TickMissed  = "missed"  // later than starting_deadline, or beyond catch-up
)

// Tick is one scheduled time of a job and what the scheduler did with it.
type Tick struct {
	Job          string    `json:"job"`
	ScheduledFor time.Time `json:"scheduled_for"`
	Outcome      string    `json:"outcome"`
	RunID        string    `json:"run_id,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	RecordedAt   time.Time `json:"recorded_at"`
}

// Scheduler is what cron schedulers need from the ledger: a leader lease,
// so that one replica fires, and ticks unique per (job, scheduled time), so
// that even two replicas that both believe they lead create one run.
type Scheduler interface {
	// Lead takes or renews the lease name for holder until now+ttl (the
	// database's clock). It reports false when another holder's lease is
	// live.
	Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// Resign gives the lease up if holder has it.
	Resign(ctx context.Context, name, holder string) error
	// RecordTick records t and, when run is not nil, creates the run (with
	// shards) in the same transaction. ErrTickExists when t's (job,
	// scheduled time) was recorded before: nothing changes.
	RecordTick(ctx context.Context, t Tick, run *jobs.Run, shards []jobs.Shard) error
	// LastTick is the job's latest recorded tick; ErrNotFound when none.
	LastTick(ctx context.Context, job string) (Tick, error)
	// FirstSeen records at as the time a scheduler first saw job, unless
	// a time is recorded already, and returns the recorded time. A job
	// with no tick yet starts from it, so whichever replica leads, and
	// however often schedulers restart, a new job's first tick is the
	// same one.
	FirstSeen(ctx context.Context, job string, at time.Time) (time.Time, error)
}
