// Package sources reads input rows. A Source plans shards from metadata alone
// (no data read), then streams one shard as Arrow record batches.
package sources

import (
	"context"
	"encoding/json"

	"github.com/apache/arrow-go/v18/arrow"
)

// Source is implemented by sources/parquet and sources/postgres.
type Source interface {
	// Schema is the Arrow schema of the whole dataset (all columns), used to
	// check the spec's key and input columns before anything is read.
	Schema(ctx context.Context) (*arrow.Schema, error)
	// Plan splits the dataset into shards of at most about rowsPerShard rows
	// without reading data. The plan is stored in the ledger, so it must be
	// stable: planning the same unchanged dataset twice gives the same shards.
	Plan(ctx context.Context, rowsPerShard int64) ([]ShardPlan, error)
	// Open streams one planned shard.
	Open(ctx context.Context, plan json.RawMessage, opts ReadOptions) (BatchReader, error)
}

// ShardPlan is one planned shard.
type ShardPlan struct {
	// Plan is the source-specific description (files, row ranges), JSON.
	Plan json.RawMessage
	// Rows is the row count known from metadata (estimate for queries).
	Rows int64
	// Desc is a short human description, e.g. "dt=2026-11-01/part-0.parquet rows 0..250000".
	Desc string
}

// PlannedRows is the rows of a shard plan, as its metadata counts them.
func PlannedRows(plans []ShardPlan) int64 {
	var n int64
	for _, p := range plans {
		n += p.Rows
	}
	return n
}

// ReadOptions narrows what a shard read returns.
type ReadOptions struct {
	// Columns to read (projection); nil means all.
	Columns []string
	// BatchSize is the rows per record batch (the last one may be shorter).
	BatchSize int
	// Reuse lets a source hand out numeric and temporal columns in memory
	// it takes back and reuses once their record's last reference is
	// released, instead of fresh heap per batch. Set it only where nothing
	// keeps a slice of such a column's values past the release (the shard
	// pipeline copies them into tensors and hands the key column to sinks,
	// which release it after writing). Strings and nested columns are never
	// reused: their values are commonly kept as Go strings.
	Reuse bool
}

// BatchReader streams a shard. Next returns io.EOF after the last batch.
// The caller owns (and must Release) each returned record.
type BatchReader interface {
	Next(ctx context.Context) (arrow.RecordBatch, error)
	// Position names the source location of row `row` of the batch Next
	// returned last, for rejects and errors naming a row:
	// "data/dt=2026-11-01/part-0.parquet row 1234".
	Position(row int) string
	// Locate returns a function naming rows of the batch Next returned last
	// as Position does, that stays valid after later calls to Next: later
	// pipeline stages (output checks, duplicate keys) name rows with it.
	Locate() func(row int) string
	Close() error
}
