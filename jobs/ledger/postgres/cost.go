package postgres

import (
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs"
)

// costJSON is a shard's cost as stored in precog_run_shards.cost: NULL
// when nothing was recorded.
func costJSON(c jobs.Cost) ([]byte, error) {
	if c.IsZero() {
		return nil, nil
	}
	return json.Marshal(c)
}

// scanShardCost reads a shard selected as shardCols followed by s.cost; a
// NULL cost (a shard not committed, or committed by a version that did not
// record costs) reads as zero.
func scanShardCost(row pgx.CollectableRow) (jobs.Shard, error) {
	var cost []byte
	s, err := scanShard(row, &cost)
	if err != nil || cost == nil {
		return s, err
	}
	if err := json.Unmarshal(cost, &s.Cost); err != nil {
		return s, err
	}
	return s, nil
}
