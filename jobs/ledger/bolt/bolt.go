// Package bolt is the embedded ledger of `precog run`: runs and shards in one
// bbolt file under the state directory. The file is opened for each
// transaction and closed after it (store.go), so several processes share a
// state directory: runs of different jobs at once, and control commands
// (`precog cancel`, `status`) reaching a running process's runs. Every
// commit is fsynced before it returns, so a kill -9 after Complete cannot
// lose the commit.
//
// Leases use wall time. A `precog run` killed while holding shards leaves
// them leased by a worker that no longer exists; once the lease expires any
// Claim takes them back. Local runs therefore use short leases renewed by
// heartbeats.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/internal/wake"
)

// Top-level buckets.
var (
	bucketRuns    = []byte("runs")    // run id → Run JSON
	bucketCreated = []byte("created") // created_at (8 bytes BE ns) + run id → run id
	bucketOpen    = []byte("open")    // job \x00 paramsKey \x00 run id → nothing; non-terminal runs only
	bucketShards  = []byte("shards")  // run id → nested bucket of that run's shards
	bucketPublish = []byte("publish") // run id → publishLease JSON while a worker holds the publish step
	bucketTicks   = []byte("ticks")   // job \x00 scheduled time (8 bytes BE ns) → Tick JSON
	bucketLeaders = []byte("leaders") // lease name → leaderLease JSON
	bucketSeen    = []byte("seen")    // job → first-seen time (8 bytes BE ns)
	bucketWorkers = []byte("workers") // worker id → workerRec JSON
	bucketRejects = []byte("rejects") // run id → nested bucket: 'r'+shard → []jobs.Reject JSON, 'c'+shard → count
)

// Nested buckets of one run under bucketShards.
var (
	subAll     = []byte("all")     // index (4 bytes BE) → Shard JSON
	subPending = []byte("pending") // indexes of pending shards
	subRunning = []byte("running") // indexes of running (leased) shards
)

// Ledger is a ledger.Ledger stored in one bbolt file. Safe for concurrent
// use; bbolt serialises writers.
type Ledger struct {
	db  *store
	now func() time.Time
	hub *wake.Hub
	// PollInterval is how often Wake fires without a notice (expired
	// leases). Default 1s; set it before the first Wake.
	PollInterval time.Duration
	// RejectsPerRun bounds the rejected rows stored per run (Rejects).
	// Default ledger.DefaultRejectsPerRun; set it before the first Complete.
	RejectsPerRun int
}

var _ ledger.Store = (*Ledger)(nil)

// backend names this ledger in ledger.Unsupported errors.
const backend = "embedded"

// FileName is the embedded ledger's file in a state directory.
const FileName = "ledger.db"

// PathIn is the embedded ledger's file in stateDir.
func PathIn(stateDir string) string { return filepath.Join(stateDir, FileName) }

// OpenIn opens the embedded ledger of a state directory (PathIn).
func OpenIn(stateDir string) (*Ledger, error) { return Open(PathIn(stateDir)) }

// Open opens the ledger file at path, e.g. ".precog/ledger.db". Other
// processes may open the same file at once; a transaction waits up to
// LockWait for theirs. The first write creates the file: until then the
// ledger reads as empty.
func Open(path string) (*Ledger, error) {
	return OpenWait(path, LockWait)
}

// OpenWait is Open with another bound on the wait for other processes'
// transactions. An existing file is opened for a transaction at once, so
// that one held past wait is ledger.ErrBusy here.
func OpenWait(path string, wait time.Duration) (*Ledger, error) {
	db, err := newStore(path, wait)
	if err != nil {
		return nil, err
	}
	if db.exists() {
		if err := db.Update(func(*bbolt.Tx) error { return nil }); err != nil {
			return nil, fmt.Errorf("ledger: initialise %s: %w", path, err)
		}
	}
	l := &Ledger{db: db, now: func() time.Time { return time.Now().UTC() }, PollInterval: time.Second}
	l.hub = newHub(l)
	return l, nil
}

// createBuckets creates the top-level buckets a ledger file holds.
func createBuckets(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketRuns, bucketCreated, bucketOpen, bucketShards, bucketPublish, bucketTicks, bucketLeaders, bucketSeen, bucketWorkers, bucketRejects} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the ledger's wake-ups (the file is closed after each
// transaction).
func (l *Ledger) Close() error {
	l.db.closed.Store(true)
	l.hub.Close()
	return nil
}

func idx(i int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(i))
	return b[:]
}

func openKey(job, paramsKey, id string) []byte {
	return []byte(job + "\x00" + paramsKey + "\x00" + id)
}

func createdKey(t time.Time, id string) []byte {
	b := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(b, uint64(t.UnixNano()))
	return append(b, id...)
}

func getRun(tx *bbolt.Tx, id string) (jobs.Run, error) {
	var r jobs.Run
	v := tx.Bucket(bucketRuns).Get([]byte(id))
	if v == nil {
		return r, fmt.Errorf("run %s: %w", id, ledger.ErrNotFound)
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("run %s: decode: %w", id, err)
	}
	return r, nil
}

// getOpenRun is getRun of a run that may still change: a finished one is
// ledger.ErrRunFinished (as the Postgres ledger's lockOpenRun).
func getOpenRun(tx *bbolt.Tx, id string) (jobs.Run, error) {
	r, err := getRun(tx, id)
	if err == nil && r.State.Terminal() {
		err = fmt.Errorf("run %s is %s: %w", id, r.State, ledger.ErrRunFinished)
	}
	return r, err
}

func putRun(tx *bbolt.Tx, r jobs.Run) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("run %s: encode: %w", r.ID, err)
	}
	return tx.Bucket(bucketRuns).Put([]byte(r.ID), v)
}

// runShards returns the nested bucket of a run's shards.
func runShards(tx *bbolt.Tx, id string) (*bbolt.Bucket, error) {
	b := tx.Bucket(bucketShards).Bucket([]byte(id))
	if b == nil {
		return nil, fmt.Errorf("run %s: %w", id, ledger.ErrNotFound)
	}
	return b, nil
}

// rec is a shard as stored: the shared fields plus the ledger's own lease
// bookkeeping (a speculative second holder, attempt start times).
type rec struct {
	jobs.Shard
	// Worker2 holds a speculative second lease until Lease2.
	Worker2 string    `json:"worker2,omitempty"`
	Lease2  time.Time `json:"lease2_until,omitzero"`
	// ClaimedAt and Claimed2At start the holders' attempts.
	ClaimedAt  time.Time `json:"claimed_at,omitzero"`
	Claimed2At time.Time `json:"claimed2_at,omitzero"`
	// RunMS is how long the committed attempt took (straggler baseline).
	RunMS float64 `json:"run_ms,omitempty"`
	// Rejects is the committed attempt's reject sample (jobs.CapSample);
	// read only while the shard is committed.
	Rejects []jobs.Reject `json:"reject_sample,omitempty"`
}

func getShard(rb *bbolt.Bucket, runID string, i int) (rec, error) {
	var s rec
	v := rb.Bucket(subAll).Get(idx(i))
	if v == nil {
		return s, fmt.Errorf("run %s shard %d: %w", runID, i, ledger.ErrNotFound)
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return s, fmt.Errorf("run %s shard %d: decode: %w", runID, i, err)
	}
	return s, nil
}

// putShard stores s and keeps the pending/running index sets in step with
// its state.
func putShard(rb *bbolt.Bucket, s rec) error {
	s.Speculative = false
	v, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("run %s shard %d: encode: %w", s.RunID, s.Index, err)
	}
	k := idx(s.Index)
	if err := rb.Bucket(subAll).Put(k, v); err != nil {
		return err
	}
	pending, running := rb.Bucket(subPending), rb.Bucket(subRunning)
	switch s.State {
	case jobs.ShardPending:
		if err := running.Delete(k); err != nil {
			return err
		}
		return pending.Put(k, nil)
	case jobs.ShardRunning:
		if err := pending.Delete(k); err != nil {
			return err
		}
		return running.Put(k, nil)
	default:
		if err := pending.Delete(k); err != nil {
			return err
		}
		return running.Delete(k)
	}
}

// CreateRun stores run in state pending with its shards, each pending with
// no attempts. run.Shards is set to len(shards).
func (l *Ledger) CreateRun(ctx context.Context, run jobs.Run, shards []jobs.Shard) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if run.ID == "" {
		return errors.New("ledger: create run: empty run id")
	}
	now := l.now()
	run.Pool = jobs.PoolOrDefault(run.Pool)
	run.State = jobs.RunPending
	run.Shards = len(shards)
	run.Counts = jobs.Counts{}
	if run.CreatedAt.IsZero() {
		run.CreatedAt = now
	}
	run.UpdatedAt = now
	err := l.db.Update(func(tx *bbolt.Tx) error { return createRunTx(tx, run, shards, now) })
	if err != nil {
		return fmt.Errorf("ledger: create run %s: %w", run.ID, err)
	}
	l.hub.Signal(run.Pool)
	return nil
}

// openRun returns the newest non-terminal run of (job, paramsKey), or nil.
func openRun(tx *bbolt.Tx, job, paramsKey string) (*jobs.Run, error) {
	var best *jobs.Run
	prefix := openKey(job, paramsKey, "")
	c := tx.Bucket(bucketOpen).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		r, err := getRun(tx, string(k[len(prefix):]))
		if err != nil {
			return nil, err
		}
		if r.State.Terminal() {
			continue
		}
		if best == nil || r.CreatedAt.After(best.CreatedAt) || (r.CreatedAt.Equal(best.CreatedAt) && r.ID > best.ID) {
			best = &r
		}
	}
	return best, nil
}

// OpenRun returns the newest non-terminal run of (job, paramsKey).
func (l *Ledger) OpenRun(ctx context.Context, job, paramsKey string) (jobs.Run, error) {
	if err := ctx.Err(); err != nil {
		return jobs.Run{}, err
	}
	var best *jobs.Run
	err := l.db.View(func(tx *bbolt.Tx) error {
		var err error
		best, err = openRun(tx, job, paramsKey)
		return err
	})
	if err != nil {
		return jobs.Run{}, fmt.Errorf("ledger: open run of %s %q: %w", job, paramsKey, err)
	}
	if best == nil {
		return jobs.Run{}, fmt.Errorf("ledger: open run of %s %q: %w", job, paramsKey, ledger.ErrNotFound)
	}
	return *best, nil
}

// Run returns one run.
func (l *Ledger) Run(ctx context.Context, id string) (jobs.Run, error) {
	if err := ctx.Err(); err != nil {
		return jobs.Run{}, err
	}
	var r jobs.Run
	err := l.db.View(func(tx *bbolt.Tx) error {
		var err error
		r, err = getRun(tx, id)
		return err
	})
	if err != nil {
		return jobs.Run{}, fmt.Errorf("ledger: %w", err)
	}
	return r, nil
}

// Runs lists runs newest first, of one job or all ("").
func (l *Ledger) Runs(ctx context.Context, job string, limit int) ([]jobs.Run, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []jobs.Run
	err := l.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketCreated).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			r, err := getRun(tx, string(v))
			if err != nil {
				return err
			}
			if job != "" && r.Job != job {
				continue
			}
			out = append(out, r)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs: %w", err)
	}
	return out, nil
}

// Shards returns a run's shards ordered by index.
func (l *Ledger) Shards(ctx context.Context, runID string) ([]jobs.Shard, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []jobs.Shard
	err := l.db.View(func(tx *bbolt.Tx) error {
		rb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		return rb.Bucket(subAll).ForEach(func(k, v []byte) error {
			var s rec
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("run %s shard %d: decode: %w", runID, binary.BigEndian.Uint32(k), err)
			}
			if s.State != jobs.ShardRunning && s.Lease2.After(s.LeaseUntil) {
				// A shard a cancel ended shows its holders' later lease.
				s.LeaseUntil = s.Lease2
			}
			out = append(out, s.Shard)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: shards: %w", err)
	}
	return out, nil
}

// RejectSample implements ledger.Ledger: the samples of the run's committed
// shards, by shard then position.
func (l *Ledger) RejectSample(ctx context.Context, runID string, limit int) ([]jobs.Reject, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []jobs.Reject
	err := l.db.View(func(tx *bbolt.Tx) error {
		rb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		c := rb.Bucket(subAll).Cursor()
		for k, v := c.First(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			var s rec
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("run %s shard %d: decode: %w", runID, binary.BigEndian.Uint32(k), err)
			}
			if s.State == jobs.ShardCommitted {
				out = append(out, s.Rejects...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: reject sample: %w", err)
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// createRunTx stores run (defaults applied) and its pending shards in tx.
func createRunTx(tx *bbolt.Tx, run jobs.Run, shards []jobs.Shard, now time.Time) error {
	if tx.Bucket(bucketRuns).Get([]byte(run.ID)) != nil {
		return fmt.Errorf("run %s already exists", run.ID)
	}
	if open, err := openRun(tx, run.Job, run.ParamsKey); err != nil {
		return err
	} else if open != nil {
		return &ledger.OpenRunError{Job: run.Job, ParamsKey: run.ParamsKey, RunID: open.ID, State: open.State}
	}
	if err := putRun(tx, run); err != nil {
		return err
	}
	if err := tx.Bucket(bucketCreated).Put(createdKey(run.CreatedAt, run.ID), []byte(run.ID)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketOpen).Put(openKey(run.Job, run.ParamsKey, run.ID), nil); err != nil {
		return err
	}
	rb, err := tx.Bucket(bucketShards).CreateBucket([]byte(run.ID))
	if err != nil {
		return err
	}
	for _, name := range [][]byte{subAll, subPending, subRunning} {
		if _, err := rb.CreateBucket(name); err != nil {
			return err
		}
	}
	for _, s := range shards {
		if s.Index < 0 || s.Index > 1<<31 {
			return fmt.Errorf("shard index %d out of range", s.Index)
		}
		if rb.Bucket(subAll).Get(idx(s.Index)) != nil {
			return fmt.Errorf("shard index %d appears twice", s.Index)
		}
		s.RunID = run.ID
		s.State = jobs.ShardPending
		s.Attempts = 0
		s.Worker = ""
		s.LeaseUntil = time.Time{}
		s.Counts = jobs.Counts{}
		s.Cost = jobs.Cost{}
		s.Error = ""
		s.UpdatedAt = now
		if err := putShard(rb, rec{Shard: s}); err != nil {
			return err
		}
	}
	return nil
}
