// Package sinks writes a run's output records. Every sink follows one
// protocol: per-shard idempotent commits, then a run-level atomic publish.
//
//	Prepare(run)                      once per process that works on the run (idempotent)
//	w := Shard(run, i)                 one attempt of shard i
//	w.Write(batch)…; w.Commit()        commit replaces any earlier attempt of shard i
//	Publish(run)                       after every shard committed: atomic cutover
//	Abort(run)                         drop everything of an unpublished run
//
// Readers never see a run before Publish, never a mix of two runs after it,
// and a retried or re-run shard never leaves duplicates or gaps.
package sinks

import (
	"context"
	"errors"

	"github.com/apache/arrow-go/v18/arrow"
)

// RunInfo is what a sink knows of the run it writes.
type RunInfo struct {
	Job     string
	RunID   string
	Version string // names the run's data in the sink: {ns}:{version}:{key}, run tables
	Params  map[string]string
	// Schema of the output records: the key column, one field per model
	// output, model_version (string), computed_at (timestamp[us, UTC]), then
	// one string column per run parameter (sorted by name).
	Schema *arrow.Schema
	// Key is the name of the key column in Schema.
	Key string
}

// Sink is implemented by sinks/parquet, sinks/redis and sinks/postgres.
type Sink interface {
	// Name is "parquet", "redis" or "postgres", for logs and errors.
	Name() string
	// Prepare checks reachability and creates what the run writes into.
	Prepare(ctx context.Context, run RunInfo) error
	// Shard starts one attempt at writing shard index.
	Shard(ctx context.Context, run RunInfo, index int) (ShardWriter, error)
	// Publish makes the run visible to readers in one step. Idempotent.
	Publish(ctx context.Context, run RunInfo) error
	// Abort removes everything the unpublished run wrote. Idempotent.
	Abort(ctx context.Context, run RunInfo) error
	Close() error
}

// ShardWriter is one attempt at one shard. Exactly one of Commit or Abort
// ends it. Nothing written is visible to readers before Publish.
type ShardWriter interface {
	// Write appends a batch with RunInfo.Schema. The writer does not retain
	// the batch after Write returns.
	Write(ctx context.Context, batch arrow.RecordBatch) error
	// Commit makes the attempt durable, replacing any earlier attempt.
	Commit(ctx context.Context) error
	// Abort discards the attempt.
	Abort(ctx context.Context) error
}

// Rollbacker is implemented by sinks that keep earlier published versions.
type Rollbacker interface {
	// Versions lists retained published versions, newest first.
	Versions(ctx context.Context, run RunInfo) ([]string, error)
	// Current is the version readers see now ("" when none is published);
	// after a rollback it is not the newest.
	Current(ctx context.Context, run RunInfo) (string, error)
	// Rollback makes version current again in one step.
	Rollback(ctx context.Context, run RunInfo, version string) error
}

// ErrUnreachable wraps connection failures so callers can tell them from
// bad data or bad configuration.
var ErrUnreachable = errors.New("sink unreachable")

// Standard output column names every record carries.
const (
	ColModelVersion = "model_version"
	ColComputedAt   = "computed_at"
)

// Checker is implemented by sinks that can verify reachability and
// permissions without writing anything (`precog validate`).
type Checker interface {
	Check(ctx context.Context) error
}
