package ledger

import (
	"context"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// Backfill is one `precog backfill`: a job run once per partition value of
// a range. Its child runs are ordinary runs (claimed, cancelled, retried and
// shown like any other); the backfill records which run computes which
// value, and how many of them may be in flight at once.
type Backfill struct {
	ID  string `json:"id"`
	Job string `json:"job"`
	// Param is the run parameter the values fill ("date").
	Param string `json:"param"`
	// From, To (inclusive) and Step ("1d", "1h"…) span the values.
	From string `json:"from"`
	To   string `json:"to"`
	Step string `json:"step"`
	// ParamsKey is the canonical list of the other params (jobs.ParamsKey),
	// part of what identifies a backfill to resume.
	ParamsKey string `json:"params_key"`
	// Parallel bounds the child runs in flight: on a cluster ledger at most
	// Parallel of them are claimable at once, the rest wait.
	Parallel int `json:"parallel"`
	// Priority is the child runs' claim priority (by default one below the
	// job's, so that a backfill never delays a scheduled refresh).
	Priority int    `json:"priority"`
	Pool     string `json:"pool"`
	// Cancelled: no child run is admitted any more.
	Cancelled bool      `json:"cancelled"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Dates are the values in range order with their runs.
	Dates []BackfillDate `json:"dates"`
}

// BackfillDate is one value of a backfill and the runs that computed it.
type BackfillDate struct {
	Value string `json:"value"`
	// Runs are every run of this value in the backfill, oldest first (a
	// retried or recomputed value has several); the last is current.
	Runs []string `json:"runs"`
}

// Run is the value's current run ("" when it has none).
func (d BackfillDate) Run() string {
	if len(d.Runs) == 0 {
		return ""
	}
	return d.Runs[len(d.Runs)-1]
}

// BackfillRun is a run given to a backfill for one value.
type BackfillRun struct {
	Value string
	// Run and Shards are created as by CreateRun, unless Attach is set:
	// then Run.ID names an existing run (one that already computed the
	// value with the same spec and model) and nothing is created.
	Run    jobs.Run
	Shards []jobs.Shard
	Attach bool
}

// Backfills is what `precog backfill` and the commands over a backfill need
// of a ledger. Both ledgers implement it (ledgertest checks them alike).
type Backfills interface {
	// CreateBackfill stores b (its Dates ignored) and its child runs in one
	// transaction, in value order; b.ID must be new. A child run whose
	// (job, params) already has an open run is an *OpenRunError and
	// nothing is stored.
	CreateBackfill(ctx context.Context, b Backfill, runs []BackfillRun) error
	// AddBackfillRuns gives values of a backfill new current runs
	// (resume, --force, retry), created or attached as in CreateBackfill.
	AddBackfillRuns(ctx context.Context, id string, runs []BackfillRun) error
	// Backfill returns one backfill with its dates; ErrNotFound if none.
	Backfill(ctx context.Context, id string) (Backfill, error)
	// Backfills lists backfills newest first, with their dates; job ""
	// means every job; limit <= 0 means all.
	Backfills(ctx context.Context, job string, limit int) ([]Backfill, error)
	// BackfillOf returns the id of the (newest) backfill a run belongs to,
	// and the value it computes; ErrNotFound when it belongs to none.
	BackfillOf(ctx context.Context, runID string) (id, value string, err error)
	// SetBackfill changes a backfill's parallelism (> 0) and whether it is
	// cancelled, admitting waiting runs up to the new bound.
	SetBackfill(ctx context.Context, id string, parallel int, cancelled bool) error
	// RetryBackfillRun takes runID, the failed current run of a value of
	// backfill id, back up as Ledger.RetryRun does (back to running, its
	// committed shards kept, its failed ones pending, the staged data a
	// pending cleanup kept the run's again), and has it wait for admission
	// like a new run: it counts against Parallel once admitted, in value
	// order, so the bound holds however many values are reopened. It
	// returns the shards moved. ErrNotFound when runID is not the current
	// run of a value of id; ErrRunOpen when the run is open (nothing to
	// reopen); RetryRun's ErrRunFinished, *OpenRunError and ErrCleaning,
	// changing nothing; ErrUnsupported on a ledger that cannot reopen a
	// failed run (the embedded one: `precog retry` gives the value a new
	// run).
	RetryBackfillRun(ctx context.Context, id, runID string) (int, error)
}

// BackfillState sums up a backfill from its current runs (by id): running
// while any is open (pending when none has started), else cancelled when
// cancelled or any run was, failed when any failed, else succeeded.
func BackfillState(b Backfill, runs map[string]jobs.Run) jobs.RunState {
	open, started, failed, cancelled := false, false, false, b.Cancelled
	for _, d := range b.Dates {
		r, ok := runs[d.Run()]
		if !ok {
			open = true
			continue
		}
		switch r.State {
		case jobs.RunPending:
			open = true
		case jobs.RunFailed:
			failed = true
			started = true
		case jobs.RunCancelled:
			cancelled = true
		case jobs.RunSucceeded:
			started = true
		default:
			open, started = true, true
		}
	}
	switch {
	case open && started:
		return jobs.RunRunning
	case open:
		return jobs.RunPending
	case failed:
		return jobs.RunFailed
	case cancelled:
		return jobs.RunCancelled
	}
	return jobs.RunSucceeded
}
