package jobs

import (
	"encoding/json"
	"slices"
	"time"
)

// RunState is the state of a run. Transitions:
// pending → running → publishing → succeeded, or → failed / cancelled;
// publishing → held when a check before the publish failed, then held →
// succeeded (accepted: published) or → cancelled (discarded).
type RunState string

// Run states.
const (
	RunPending    RunState = "pending"
	RunRunning    RunState = "running"
	RunPublishing RunState = "publishing"
	RunSucceeded  RunState = "succeeded"
	RunFailed     RunState = "failed"
	RunCancelled  RunState = "cancelled"
	// RunHeld: the run's checks failed; nothing was published and its
	// staged data is kept until `precog publish --accept` or `cancel`.
	RunHeld RunState = "held"
)

// runStates are every state a ledger stores, in lifecycle order.
var runStates = []RunState{RunPending, RunRunning, RunPublishing, RunHeld, RunSucceeded, RunFailed, RunCancelled}

// RunStates are every state a ledger stores, in lifecycle order: the one
// list of them that views and filters derive theirs from.
func RunStates() []RunState { return slices.Clone(runStates) }

// Terminal reports whether the run's work is over: no claims, no resume,
// not open for overlap policies. A held run is terminal in this sense; only
// ledger.Checks.ResolveHold moves it on.
func (s RunState) Terminal() bool {
	return s == RunSucceeded || s == RunFailed || s == RunCancelled || s == RunHeld
}

// ShardState is the state of one shard: pending → running → committed, or
// running → pending again (retry, lease expiry) or → failed (attempts spent).
type ShardState string

// Shard states.
const (
	ShardPending   ShardState = "pending"
	ShardRunning   ShardState = "running"
	ShardCommitted ShardState = "committed"
	ShardFailed    ShardState = "failed"
)

// Counts are the row counters of a shard or a run.
type Counts struct {
	RowsIn   int64 `json:"rows_in"`
	RowsOut  int64 `json:"rows_out"`
	Rejected int64 `json:"rejected"`
	// KeySketch is a shard's HyperLogLog of its keys (internal/hll, base64),
	// merged at publish to estimate duplicates across shards. Not summed by
	// Add. A string keeps Counts comparable.
	KeySketch string `json:"key_sketch,omitempty"`
}

// Add returns c + o.
func (c Counts) Add(o Counts) Counts {
	return Counts{RowsIn: c.RowsIn + o.RowsIn, RowsOut: c.RowsOut + o.RowsOut, Rejected: c.Rejected + o.Rejected}
}

// Run is one execution of a job with its parameters. Its Version names what
// it writes in every sink ({namespace}:{version}:{key}, run tables, …).
type Run struct {
	ID      string            `json:"id"`
	Job     string            `json:"job"`
	Version string            `json:"version"`
	Params  map[string]string `json:"params,omitempty"`
	// ParamsKey identifies (job, params) for resume: the canonical k=v list.
	ParamsKey string `json:"params_key"`
	// SpecHash detects a spec edited between a crash and its resume.
	SpecHash     string `json:"spec_hash"`
	ModelVersion string `json:"model_version"`
	// Pool is the worker pool that claims the run's shards ("" reads as
	// jobs.DefaultPool).
	Pool string `json:"pool"`
	// Priority orders claims between runs of one pool: higher first.
	Priority  int       `json:"priority"`
	State     RunState  `json:"state"`
	Error     string    `json:"error,omitempty"`
	Shards    int       `json:"shards"`
	Counts    Counts    `json:"counts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Spec is the job spec source (YAML) the run was created from, so that
	// cluster workers execute exactly what was submitted.
	Spec []byte `json:"spec,omitempty"`
	// SpecFile is where Spec was loaded from (relative paths in it resolve
	// against its directory).
	SpecFile string `json:"spec_file,omitempty"`
	// Retries counts how often `precog retry` took the run back up after
	// it failed. The failure aborted the run in every sink, so what a
	// worker prepared for an earlier generation is stale.
	Retries int `json:"retries,omitempty"`
}

// SameWork reports whether the run computes what spec and a model of
// modelVersion would: the one rule for resuming, joining or skipping a run
// (a spec edited or a model swapped since it was created is other work).
func (r Run) SameWork(spec *Spec, modelVersion string) bool {
	return r.SpecHash == spec.Hash() && r.ModelVersion == modelVersion
}

// Shard is one unit of work and of resume: a slice of the source planned
// without reading data.
type Shard struct {
	RunID string `json:"run_id"`
	Index int    `json:"index"`
	// Plan is the source's description of the shard (files, row ranges).
	Plan json.RawMessage `json:"plan"`
	// EstRows is the planned row count (from metadata).
	EstRows  int64      `json:"est_rows"`
	State    ShardState `json:"state"`
	Attempts int        `json:"attempts"`
	Worker   string     `json:"worker,omitempty"`
	// Speculative marks a second lease of a straggling shard (ClaimNext):
	// whichever attempt completes first wins, the other's Complete is
	// refused with ledger.ErrLeaseLost.
	Speculative bool      `json:"speculative,omitempty"`
	LeaseUntil  time.Time `json:"lease_until,omitzero"`
	Counts      Counts    `json:"counts"`
	// Cost is what the committed attempt used (jobs.Cost); zero before.
	Cost      Cost      `json:"cost,omitzero"`
	Error     string    `json:"error,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PoolOrDefault is the pool p names, DefaultPool when empty: the one place
// a run, backfill, worker or view without a recorded pool gets the default.
func PoolOrDefault(p string) string {
	if p == "" {
		return DefaultPool
	}
	return p
}
