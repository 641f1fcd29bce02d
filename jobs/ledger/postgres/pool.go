package postgres

import (
	"context"
	"fmt"

	"github.com/precog-ml/precog/jobs/ledger"
)

// PoolLoad implements ledger.Cluster. It reads the partial indexes on open
// runs and pending/running shards, as deploy/k8s's KEDA query does.
func (l *Ledger) PoolLoad(ctx context.Context, pool string) (ledger.PoolLoad, error) {
	var pl ledger.PoolLoad
	err := l.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE s.state = 'pending' AND r.state IN ('pending', 'running')),
		count(*) FILTER (WHERE s.state = 'running' AND r.state IN ('pending', 'running')),
		(SELECT count(*) FROM precog_runs WHERE pool = $1 AND state = 'publishing')
		FROM precog_runs r JOIN precog_run_shards s ON s.run_id = r.id AND s.state IN ('pending', 'running')
		WHERE r.pool = $1 AND r.state IN ('pending', 'running', 'publishing')`, pool).
		Scan(&pl.Pending, &pl.Running, &pl.Publishing)
	if err != nil {
		return pl, fmt.Errorf("ledger: load of pool %s: %w", pool, err)
	}
	return pl, nil
}
