package bolt

import (
	"context"
	"time"

	"github.com/precog-ml/precog/jobs/ledger/internal/wake"
)

func newHub(l *Ledger) *wake.Hub {
	return wake.New(func() time.Duration { return l.PollInterval }, nil)
}

// Wake implements ledger.Cluster with an in-process broadcast of this
// process's changes; another process's (a cancel, a run of another job)
// are seen at the next poll (PollInterval).
func (l *Ledger) Wake(ctx context.Context, pool string) <-chan struct{} {
	return l.hub.Subscribe(ctx, pool)
}
