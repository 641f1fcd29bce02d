package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// Baseline is what a published version leaves for the checks of the runs
// that would replace it: its rows and its merged output profile
// (internal/profile, encoded), so that a check never rescans old data.
type Baseline struct {
	// Job and Target identify what was published: the job and the
	// rendered sink targets it wrote (runner's checkTarget).
	Job, Target string
	RunID       string
	Version     string
	RowsOut     int64
	Profile     string
	PublishedAt time.Time
}

// Acceptance records who published a held run and why.
type Acceptance struct {
	By, Reason string
	At         time.Time
}

// ResolveHoldParams publish or discard a held run (Checks.ResolveHold),
// recording who did and why.
type ResolveHoldParams struct {
	RunID string
	// State is succeeded (accepted and published) or cancelled
	// (discarded).
	State      jobs.RunState
	By, Reason string
}

// Validate refuses a state other than succeeded or cancelled, before a
// ledger reads the run.
func (p ResolveHoldParams) Validate() error {
	if p.State != jobs.RunSucceeded && p.State != jobs.RunCancelled {
		return fmt.Errorf("ledger: resolve held run %s: state %q is neither succeeded nor cancelled", p.RunID, p.State)
	}
	return nil
}

// Checks is what the checks before a publish need from a ledger; both
// ledgers implement it (ledgertest.Exercise). A run held by its
// checks is in state jobs.RunHeld: finished as far as claims, resume and
// overlap policies go, until ResolveHold publishes or discards it.
type Checks interface {
	// PutShardProfile stores a shard attempt's output profile before the
	// shard commits, replacing an earlier attempt's (the same input and
	// model give the same profile).
	PutShardProfile(ctx context.Context, runID string, shard int, profile string) error
	// ShardProfiles returns the stored profiles of a run's shards by index.
	ShardProfiles(ctx context.Context, runID string) (map[int]string, error)
	// PutCheckReport stores the checks' report (JSON) of a run.
	PutCheckReport(ctx context.Context, runID string, report []byte) error
	// CheckReport returns a run's stored report; ErrNotFound when none.
	CheckReport(ctx context.Context, runID string) ([]byte, error)
	// Hold moves a non-terminal run to held with msg (ErrRunFinished when
	// it is terminal already).
	Hold(ctx context.Context, runID, msg string) error
	// ResolveHold moves a held run to state (succeeded: accepted and
	// published; cancelled: discarded), recording by and reason. A run
	// that is not held is ErrRunFinished (or ErrRunOpen when it is open).
	ResolveHold(ctx context.Context, p ResolveHoldParams) error
	// Acceptance returns who resolved a held run and why; ErrNotFound when
	// nobody did.
	Acceptance(ctx context.Context, runID string) (Acceptance, error)
	// PutBaseline records b as the published version of (b.Job, b.Target).
	PutBaseline(ctx context.Context, b Baseline) error
	// Baseline returns the published version of (job, target); ErrNotFound
	// when nothing was published there with a profile.
	Baseline(ctx context.Context, job, target string) (Baseline, error)
}
