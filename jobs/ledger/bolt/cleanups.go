package bolt

import (
	"context"

	"github.com/precog-ml/precog/jobs/ledger"
)

// The embedded ledger keeps no pending cleanups: it has no workers with
// another environment to finish them, so `precog cancel RUN` run again
// where the sinks' environment is set cleans them. Each method is
// ledger.ErrUnsupported and changes nothing.

// noCleanups says why.
const noCleanups = "it keeps no pending sink cleanups; run `precog cancel RUN` again where the sinks' environment is set"

// AddCleanup implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) AddCleanup(ctx context.Context, runID, reason string) error {
	return ledger.Unsupported(backend, "record the pending cleanup of run "+runID, noCleanups)
}

// CleanupsDue implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) CleanupsDue(ctx context.Context, pool string, limit int) ([]string, error) {
	return nil, ledger.Unsupported(backend, "list the pending cleanups of pool "+pool, noCleanups)
}

// CleanupDone implements ledger.Cleanups: ledger.ErrUnsupported.
func (l *Ledger) CleanupDone(ctx context.Context, runID string) error {
	return ledger.Unsupported(backend, "clear the pending cleanup of run "+runID, noCleanups)
}
