package ledger

import (
	"context"
	"errors"
	"time"
)

// ErrCleaning: a holder (a worker of the pool, precog cancel) is removing
// the run's unpublished data from its sinks right now, under a live claim
// (BeginCleanup); RetryRun refuses the run until the claim ends, since
// reopening it would let new shards land in what is being removed.
var ErrCleaning = errors.New("run's sinks are being cleaned")

// Cleanups records runs whose sinks still hold their unpublished data,
// and when that data is due for removal:
//   - a cancelled run whose cancelling process could not clean them (it
//     lacked the sinks' environment, or a sink was down): due at once;
//   - a cluster run that failed with its staged data still good for a
//     `precog retry` of the same run (its shards ran out of attempts):
//     due once retry.keep_failed has passed, so a retry within the window
//     resumes the run instead of recomputing its committed shards.
//
// A worker of the run's pool, which has the sinks' environment, claims a
// due cleanup (BeginCleanup, a lease), removes the data and clears the
// record (CleanupDone). RetryRun deletes a failed run's record in the
// transaction that reopens it, and refuses while a claim is live
// (ErrCleaning): a cleanup never removes the data of a reopened run. The
// Postgres ledger has it; on the embedded ledger every method is
// ErrUnsupported (`precog cancel RUN` run again cleans, and a failed local
// run stays open and resumes).
type Cleanups interface {
	// AddCleanup records that p.RunID's sinks still hold its data, why,
	// and from when it is due; recording it again replaces the reason and
	// the due time (and ends a claim). It wakes the run's pool.
	// ErrNotFound for an unknown run; ErrRunOpen for a run that is not
	// failed or cancelled (a retry reopened it meanwhile: its data is in
	// use again).
	AddCleanup(ctx context.Context, p CleanupParams) error
	// CleanupsDue lists the runs of pool whose cleanup is due (DueIn
	// passed on the ledger's clock) and not claimed by a live holder,
	// oldest first, at most limit.
	CleanupsDue(ctx context.Context, pool string, limit int) ([]string, error)
	// PendingCleanup is runID's record (ErrNotFound when it has none):
	// what precog status says of a failed run's staged data.
	PendingCleanup(ctx context.Context, runID string) (Cleanup, error)
	// BeginCleanup claims runID's due cleanup for p.Holder for p.Lease:
	// the holder may remove the run's data until the lease ends.
	// ErrNotFound when there is no record (cleaned, or the run was
	// retried) or it is not due yet (a record of a run that is not failed
	// or cancelled is dropped: it is nobody's to clean); ErrCleaning while
	// a claim is live, the holder's own included (two claim loops of one
	// worker do not clean the same run twice).
	BeginCleanup(ctx context.Context, p BeginCleanupParams) error
	// CleanupDone clears runID's record. With p.Holder set it is fenced:
	// only that holder's claim is cleared, and a record gone or claimed by
	// another is ErrLeaseLost; without one (precog cancel cleaned the
	// sinks itself) the record is cleared as it is (none: no error).
	CleanupDone(ctx context.Context, p CleanupDoneParams) error
}

// CleanupParams is a pending cleanup to record.
type CleanupParams struct {
	RunID  string
	Reason string
	// DueIn is how long after it is recorded, on the ledger's clock (no
	// skew between machines), the cleanup becomes due; 0: at once.
	DueIn time.Duration
}

// Cleanup is a pending cleanup as recorded.
type Cleanup struct {
	RunID     string
	Pool      string
	Reason    string
	CreatedAt time.Time
	// DueAt is when it is (or became) due, on the ledger's clock.
	DueAt time.Time
	// Holder claimed it until HeldUntil ("" when unclaimed).
	Holder    string
	HeldUntil time.Time
}

// BeginCleanupParams claim a due cleanup.
type BeginCleanupParams struct {
	RunID, Holder string
	Lease         time.Duration
}

// CleanupDoneParams clear a cleanup's record.
type CleanupDoneParams struct {
	RunID string
	// Holder fences the clear to its claim ("": unfenced).
	Holder string
}
