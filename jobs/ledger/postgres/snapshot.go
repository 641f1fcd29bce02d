package postgres

import (
	"context"
	"log/slog"

	"github.com/precog-ml/precog/jobs/ledger"
)

// KeepSnapshots implements ledger.Snapshots: ledger.ErrUnsupported.
func (l *Ledger) KeepSnapshots(ctx context.Context, log *slog.Logger) (ledger.Snapshotter, error) {
	return nil, ledger.Unsupported("Postgres", "keep snapshots", "its readers never wait on a writer; they read the ledger itself")
}
