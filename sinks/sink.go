// Package sinks writes a run's output records. Every sink follows one
// protocol: per-shard idempotent commits, then a run-level two-phase publish.
//
//	l := Lock(run, holder)            one writer per target (job, params) at a time
//	Prepare(run)                      once per process that works on the run (idempotent)
//	w := Shard(run, i)                one attempt of shard i
//	w.Write(batch)…; w.Commit()       commit replaces any earlier attempt of shard i
//	Stage(run, committed)             phase one: every fallible step, nothing visible
//	Publish(run)                      phase two: the atomic cutover, one step
//	Abort(run)                        drop everything of an unpublished run
//	l.Release()
//
// Readers never see a run before Publish, never a mix of two runs after it,
// and a retried or re-run shard never leaves duplicates or gaps. A runner
// calls Publish on no sink before Stage has succeeded on every sink, so a
// failure in phase one publishes nothing anywhere.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/jobs"
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

// NewRunInfo is what the sinks are told of run, a run of spec: the job,
// id, version and params the run recorded (a run's params are what it ran
// with, and name its target, whatever params the spec at hand was loaded
// with), spec's key column, and output, the job's output schema (nil where
// the run is only aborted or cleaned). Every RunInfo of a run is built
// here, so that no caller picks the params of its own.
func NewRunInfo(spec *jobs.Spec, run jobs.Run, output *arrow.Schema) RunInfo {
	return RunInfo{Job: run.Job, RunID: run.ID, Version: run.Version, Params: run.Params, Schema: output, Key: spec.Source.Key}
}

// TargetInfo names spec's target with no run: its job, params and key
// column, for what acts on the target's versions (rollback, gc).
func TargetInfo(spec *jobs.Spec) RunInfo {
	return RunInfo{Job: spec.Name, Params: spec.Params, Key: spec.Source.Key}
}

// CommittedShard is what the ledger recorded for a committed shard: what
// Stage verifies the store still holds.
type CommittedShard struct {
	Index int
	// Rows is the number of records the shard's committed attempt wrote.
	Rows int64
}

// Sink is implemented by sinks/parquet, sinks/redis and sinks/postgres.
type Sink interface {
	// Name is "parquet", "redis" or "postgres", for logs and errors.
	Name() string
	// Lock makes this process the only writer of the sink's target (the
	// directory, table + params, or namespace) until Release. A target held
	// by another writer is a *LockedError naming it. Locks are independent
	// of the ledger, so two runs on different ledgers are fenced too.
	Lock(ctx context.Context, run RunInfo, holder Holder) (Lock, error)
	// Prepare checks reachability and ownership of the target (a target that
	// precog did not create is an *NotOwnedError and is left untouched) and
	// creates what the run writes into.
	Prepare(ctx context.Context, run RunInfo) error
	// Shard starts one attempt at writing shard index.
	Shard(ctx context.Context, run RunInfo, index int) (ShardWriter, error)
	// Stage is phase one of the publish: it verifies that the store still
	// holds every committed shard with its row count (a *MissingError lists
	// those it lost, which the runner recomputes), checks duplicates where
	// the store can (*DuplicateKeyError), and does every other fallible step
	// (indexes, staging). Nothing becomes visible to readers. Idempotent.
	Stage(ctx context.Context, run RunInfo, committed []CommittedShard) error
	// Publish is phase two: it makes the staged run visible to readers in
	// one atomic step. Idempotent: a version published before is left as
	// it is. It never moves readers back behind a later published version
	// (CheckPublishOrder, decided atomically with the cutover): that is a
	// *SupersededError and nothing changes.
	Publish(ctx context.Context, run RunInfo) error
	// Abort removes everything the unpublished run wrote. Idempotent.
	Abort(ctx context.Context, run RunInfo) error
	Close() error
}

// ShardWriter is one attempt at one shard. Exactly one of Commit or Abort
// ends it. Nothing written is visible to readers before Publish.
type ShardWriter interface {
	// Write appends a batch with RunInfo.Schema. The caller keeps its own
	// reference and releases it as usual; a writer that still reads the
	// batch after Write returns (encoding on other goroutines) holds a
	// reference of its own (Retain) and releases it by Commit or Abort.
	// Arrow batches are immutable, so the caller never has to wait for it.
	Write(ctx context.Context, batch arrow.RecordBatch) error
	// Commit makes the attempt durable, replacing any earlier attempt.
	Commit(ctx context.Context) error
	// Abort discards the attempt.
	Abort(ctx context.Context) error
}

// Lock is a held writer lock on one sink target.
type Lock interface {
	// Lost is closed when the lock can no longer be guaranteed (its lease
	// expired or was taken over): the holder must stop writing at once.
	Lost() <-chan struct{}
	// Release gives the target up. Idempotent.
	Release(ctx context.Context) error
}

// Holder identifies a writer in lock records and in the error a second
// writer gets.
type Holder struct {
	Job   string    `json:"job"`
	RunID string    `json:"run_id"`
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
	// Lease is how long the lock outlives the holder's last renewal (a
	// frozen or dead holder blocks the target no longer); 0 is the sink's
	// default, DefaultLockLease. A cluster worker passes its --lease, so
	// that a publisher frozen while it holds the targets is taken over as
	// soon as its ledger lease is.
	Lease time.Duration `json:"lease,omitempty"`
}

// DefaultLockLease is the lease of a sink's writer lock when the holder
// names none: renewed every third of it, and a holder that stops renewing
// (killed, frozen, cut off) loses the target after it.
const DefaultLockLease = 30 * time.Second

// ThisProcess is a Holder for run on this host and process.
func ThisProcess(run RunInfo) Holder {
	host, _ := os.Hostname()
	return Holder{Job: run.Job, RunID: run.RunID, Host: host, PID: os.Getpid(), Since: time.Now().UTC().Truncate(time.Second)}
}

func (h Holder) String() string {
	return fmt.Sprintf("run %s of job %s (host %s, pid %d, since %s)", h.RunID, h.Job, h.Host, h.PID, h.Since.Format(time.RFC3339))
}

// LockedError: another writer holds the target.
type LockedError struct {
	Sink   string
	Target string
	Holder Holder
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s target %s is being written by %s; wait for it to finish, or stop it", e.Sink, e.Target, e.Holder)
}

// NotOwnedError: the target exists and precog did not create it, so precog
// will neither write into it nor replace it.
type NotOwnedError struct {
	Sink   string
	Target string
	// Hint says how to proceed ("choose an empty or new directory …").
	Hint string
}

// Permanent tells retry policies that retrying cannot help.
func (e *NotOwnedError) Permanent() bool { return true }

func (e *NotOwnedError) Error() string {
	msg := fmt.Sprintf("%s target %s exists and was not created by precog; it is left untouched", e.Sink, e.Target)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// MissingError: committed shards the store no longer holds (a restart
// without persistence, eviction, a deleted file). The runner recomputes them
// instead of publishing around them.
type MissingError struct {
	Sink   string
	Shards []int
	// Reason is what the check found ("marker missing", "file has 0 of 1000 rows").
	Reason string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s lost %d committed shard(s) %s: %s", e.Sink, len(e.Shards), shardList(e.Shards), e.Reason)
}

func shardList(s []int) string {
	const show = 10
	parts := make([]string, 0, min(len(s), show)+1)
	for i, v := range s {
		if i == show {
			parts = append(parts, fmt.Sprintf("… %d more", len(s)-show))
			break
		}
		parts = append(parts, fmt.Sprint(v))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// CheckPublishOrder is the one rule every sink's Publish applies before its
// cutover: version may become current only if no later version was
// published to the target. latest is the newest version the target has
// published ("" when none; jobs.LatestVersion picks it from a list).
// "Later" is jobs.Version.CreatedAfter: created at a later time, so only
// two runs created at the same microsecond (or, made by an older precog,
// in the same second) publish in either order. A retry of an old failed
// run, a publisher that froze and resumed after a newer run published, or
// a publish racing a rollback cannot move readers back; moving back on
// purpose is Rollbacker.Rollback's job.
func CheckPublishOrder(sink, version, latest string) error {
	if latest != "" && jobs.Version(latest).CreatedAfter(jobs.Version(version)) {
		return &SupersededError{Sink: sink, Version: version, Later: latest}
	}
	return nil
}

// SupersededError: Publish refused because a later version was published
// to the target; nothing changed.
type SupersededError struct {
	Sink, Version, Later string
}

// Permanent tells retry policies that retrying cannot help.
func (e *SupersededError) Permanent() bool { return true }

func (e *SupersededError) Error() string {
	return fmt.Sprintf("%s: version %s was not published: the later version %s is already published there (publishing would move readers back; use precog rollback to do that on purpose)", e.Sink, e.Version, e.Later)
}

// DuplicateKeyError: the same key was written twice in one run.
type DuplicateKeyError struct {
	Sink string
	Key  string
	// First and Second name the two places (shard, file and row) when known.
	First, Second string
}

// Permanent tells retry policies that retrying cannot help.
func (e *DuplicateKeyError) Permanent() bool { return true }

func (e *DuplicateKeyError) Error() string {
	msg := fmt.Sprintf("duplicate key %q", e.Key)
	if e.Sink != "" {
		msg = e.Sink + ": " + msg
	}
	if e.First != "" || e.Second != "" {
		msg += fmt.Sprintf(" (at %s and at %s)", e.First, e.Second)
	}
	return msg + `; keys must be unique per run (duplicate_keys: reject turns repeats within a shard into rejects)`
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

// Standard output column names every record carries (jobs owns them).
const (
	ColModelVersion = jobs.ColModelVersion
	ColComputedAt   = jobs.ColComputedAt
)

// Checker is implemented by sinks that can verify reachability, permissions
// and ownership of their target without writing anything (`precog validate`).
type Checker interface {
	Check(ctx context.Context) error
}

// Inventory is implemented by sinks that can list every version of a job's
// data they hold, published or not, so that `precog gc` can remove what no
// run owns any more (the leftovers of killed runs). Abort of a listed
// version removes its entries that are not Published and never anything
// readers see.
type Inventory interface {
	// Stored lists what the sink holds for run's target (run.Job and
	// run.Params pick it; the other fields are ignored): one entry per
	// version and place. Only what precog created is listed, never a
	// user's file, table or key.
	Stored(ctx context.Context, run RunInfo) ([]StoredVersion, error)
}

// StoredVersion is one version's data in one place of a sink.
type StoredVersion struct {
	Version string
	// Published: readers see it now, or retention keeps it as a rollback
	// target. gc keeps it.
	Published bool
	// Current: readers see it now (implies Published).
	Current bool
	// What describes the data for people, with its approximate size:
	// "run table public.scores__v1 (~12000 rows, 1.2 MB)".
	What string
}
