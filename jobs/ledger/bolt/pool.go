package bolt

import (
	"context"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// PoolLoad implements ledger.Cluster.
func (l *Ledger) PoolLoad(ctx context.Context, pool string) (ledger.PoolLoad, error) {
	var pl ledger.PoolLoad
	if err := ctx.Err(); err != nil {
		return pl, err
	}
	err := l.db.View(func(tx *bbolt.Tx) error {
		cands, err := poolRuns(tx, pool, jobs.RunPending, jobs.RunRunning, jobs.RunPublishing)
		if err != nil {
			return err
		}
		for _, c := range cands {
			if c.run.State == jobs.RunPublishing {
				pl.Publishing++
				continue
			}
			pl.Pending += c.rb.Bucket(subPending).Stats().KeyN
			pl.Running += c.busy
		}
		return nil
	})
	if err != nil {
		return pl, fmt.Errorf("ledger: load of pool %s: %w", pool, err)
	}
	return pl, nil
}
