package bolt

import (
	"context"

	"github.com/precog-ml/precog/jobs/ledger"
)

// The embedded ledger keeps no pending cleanups: it has no workers with
// another environment to finish them, so `precog cancel RUN` run again
// where the sinks' environment is set cleans them, and a local run whose
// shards ran out of attempts stays open (the next precog run resumes it).
// Each method is ledger.ErrUnsupported and changes nothing.

// noCleanups says why.
const noCleanups = "it keeps no pending sink cleanups; run `precog cancel RUN` again where the sinks' environment is set"

// AddCleanup implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) AddCleanup(ctx context.Context, p ledger.CleanupParams) error {
	return ledger.Unsupported(backend, "record the pending cleanup of run "+p.RunID, noCleanups)
}

// CleanupsDue implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) CleanupsDue(ctx context.Context, pool string, limit int) ([]string, error) {
	return nil, ledger.Unsupported(backend, "list the pending cleanups of pool "+pool, noCleanups)
}

// PendingCleanup implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) PendingCleanup(ctx context.Context, runID string) (ledger.Cleanup, error) {
	return ledger.Cleanup{}, ledger.Unsupported(backend, "read the pending cleanup of run "+runID, noCleanups)
}

// BeginCleanup implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) BeginCleanup(ctx context.Context, p ledger.BeginCleanupParams) error {
	return ledger.Unsupported(backend, "claim the pending cleanup of run "+p.RunID, noCleanups)
}

// CleanupDone implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) CleanupDone(ctx context.Context, p ledger.CleanupDoneParams) error {
	return ledger.Unsupported(backend, "clear the pending cleanup of run "+p.RunID, noCleanups)
}
