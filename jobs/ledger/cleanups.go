package ledger

import "context"

// Cleanups records cancelled runs whose sinks still hold their
// unpublished data: the process that cancelled could not clean them (it
// lacked the sinks' environment, or a sink was down). A worker of the
// run's pool, which has the environment, finishes the cleanup and clears
// the record. The Postgres ledger has it; on the embedded ledger the next
// `precog cancel RUN` cleans again.
type Cleanups interface {
	// AddCleanup records that runID's sinks still hold its data, and why;
	// recording it again replaces the reason. It wakes the run's pool.
	AddCleanup(ctx context.Context, runID, reason string) error
	// CleanupsDue lists the runs of pool waiting for a cleanup, oldest
	// first, at most limit.
	CleanupsDue(ctx context.Context, pool string, limit int) ([]string, error)
	// CleanupDone clears runID's record (none: no error).
	CleanupDone(ctx context.Context, runID string) error
}
