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
// heartbeats, and a restarted process may also call ReleaseWorker with the
// dead worker's name to reclaim its shards at once.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// Open opens (creating if needed) the ledger file at path, e.g.
// ".precog/ledger.db". Other processes may open the same file at once;
// a transaction waits up to LockWait for theirs.
func Open(path string) (*Ledger, error) {
	return OpenWait(path, LockWait)
}

// OpenWait is Open with another bound on the wait for other processes'
// transactions.
func OpenWait(path string, wait time.Duration) (*Ledger, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ledger: create state dir %s: %w", dir, err)
	}
	db, err := newStore(path, wait)
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketRuns, bucketCreated, bucketOpen, bucketShards, bucketPublish, bucketTicks, bucketLeaders, bucketSeen, bucketWorkers, bucketRejects} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ledger: initialise %s: %w", path, err)
	}
	l := &Ledger{db: db, now: func() time.Time { return time.Now().UTC() }, PollInterval: time.Second}
	l.hub = newHub(l)
	return l, nil
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

// JobNames implements ledger.Ledger: it reads the job of every run (the
// embedded ledger has no index by job; it holds one machine's runs).
func (l *Ledger) JobNames(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	err := l.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRuns).ForEach(func(_, v []byte) error {
			var r struct{ Job string }
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			seen[r.Job] = true
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: job names: %w", err)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// CheckClaim implements ledger.Cluster: nil. The embedded ledger's file
// is opened for each transaction, so a claim that cannot write fails
// itself with the reason; there is no session whose rights could differ.
func (l *Ledger) CheckClaim(ctx context.Context) error { return ctx.Err() }

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

// expired reports whether nobody holds a live lease on a running shard
// (its holders are presumed dead).
func expired(s rec, now time.Time) bool {
	return !s.LeaseUntil.After(now) && (s.Worker2 == "" || !s.Lease2.After(now))
}

// claimable returns the shard of run to lease next: an expired lease
// first, else the lowest pending index; -1 when none. The running set
// holds at most one entry per live worker, so its scan stays cheap.
func claimable(rb *bbolt.Bucket, runID string, now time.Time, pending bool) (int, error) {
	c := rb.Bucket(subRunning).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		s, err := getShard(rb, runID, int(binary.BigEndian.Uint32(k)))
		if err != nil {
			return -1, err
		}
		if expired(s, now) {
			return s.Index, nil
		}
	}
	if pending {
		if k, _ := rb.Bucket(subPending).Cursor().First(); k != nil {
			return int(binary.BigEndian.Uint32(k)), nil
		}
	}
	return -1, nil
}

// lease gives shard i of run r to worker inside tx and moves a pending run
// to running.
func (l *Ledger) lease(tx *bbolt.Tx, rb *bbolt.Bucket, r *jobs.Run, i int, worker string, d time.Duration) (jobs.Shard, error) {
	now := l.now()
	s, err := getShard(rb, r.ID, i)
	if err != nil {
		return jobs.Shard{}, err
	}
	s.State = jobs.ShardRunning
	s.Attempts++
	s.Worker, s.LeaseUntil, s.ClaimedAt = worker, now.Add(d), now
	s.Worker2, s.Lease2, s.Claimed2At = "", time.Time{}, time.Time{}
	s.UpdatedAt = now
	if err := putShard(rb, s); err != nil {
		return jobs.Shard{}, err
	}
	if r.State == jobs.RunPending {
		r.State = jobs.RunRunning
		r.UpdatedAt = now
		if err := putRun(tx, *r); err != nil {
			return jobs.Shard{}, err
		}
	}
	return s.Shard, nil
}

// Claim leases a shard of one run: an expired lease first, else the lowest
// pending index.
func (l *Ledger) Claim(ctx context.Context, runID, worker string, lease time.Duration) (jobs.Shard, error) {
	if err := ctx.Err(); err != nil {
		return jobs.Shard{}, err
	}
	if worker == "" {
		return jobs.Shard{}, errors.New("ledger: claim: empty worker name")
	}
	var out jobs.Shard
	err := l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getRun(tx, runID)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			return fmt.Errorf("run %s is %s: %w", runID, r.State, ledger.ErrRunFinished)
		}
		rb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		i, err := claimable(rb, runID, l.now(), true)
		if err != nil {
			return err
		}
		if i < 0 {
			return fmt.Errorf("run %s: %w", runID, ledger.ErrNoShard)
		}
		out, err = l.lease(tx, rb, &r, i, worker, lease)
		return err
	})
	if err != nil {
		return jobs.Shard{}, fmt.Errorf("ledger: claim by %s: %w", worker, err)
	}
	return out, nil
}

// held loads shard i of runID inside tx and checks that worker holds a live
// lease on it (as its primary or speculative holder) in a run that is not
// terminal. second reports the speculative holder.
func (l *Ledger) held(tx *bbolt.Tx, runID string, i int, worker string) (rb *bbolt.Bucket, s rec, second bool, err error) {
	r, err := getRun(tx, runID)
	if err != nil {
		return nil, s, false, err
	}
	if rb, err = runShards(tx, runID); err != nil {
		return nil, s, false, err
	}
	if s, err = getShard(rb, runID, i); err != nil {
		return nil, s, false, err
	}
	if r.State.Terminal() {
		return nil, s, false, fmt.Errorf("run %s shard %d, worker %s: the run is %s: %w (%w)", runID, i, worker, r.State, ledger.ErrRunFinished, ledger.ErrLeaseLost)
	}
	now := l.now()
	switch {
	case s.State == jobs.ShardRunning && s.Worker == worker && s.LeaseUntil.After(now):
		return rb, s, false, nil
	case s.State == jobs.ShardRunning && s.Worker2 == worker && s.Lease2.After(now):
		return rb, s, true, nil
	}
	return nil, s, false, fmt.Errorf("run %s shard %d, worker %s: shard is %s, held by %q: %w", runID, i, worker, s.State, s.Worker, ledger.ErrLeaseLost)
}

// Heartbeat extends worker's lease on the shard to now+lease. An expired
// lease is lost even if nobody re-claimed it yet: the worker cannot know.
func (l *Ledger) Heartbeat(ctx context.Context, p ledger.HeartbeatParams) error {
	runID, shard, worker, lease := p.RunID, p.Shard, p.Worker, p.Lease
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		rb, s, second, err := l.held(tx, runID, shard, worker)
		if err != nil {
			return err
		}
		now := l.now()
		if second {
			s.Lease2 = now.Add(lease)
		} else {
			s.LeaseUntil = now.Add(lease)
		}
		s.UpdatedAt = now
		return putShard(rb, s)
	})
	if err != nil {
		return fmt.Errorf("ledger: heartbeat: %w", err)
	}
	return nil
}

// Complete marks the shard committed with its reject sample (replacing an
// earlier attempt's) and adds counts to the run's; the first of two holders
// to complete wins and voids the other's lease.
func (l *Ledger) Complete(ctx context.Context, p ledger.CompleteParams) error {
	runID, shard, worker, counts, sample := p.RunID, p.Shard, p.Worker, p.Counts, p.Sample
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		rb, s, second, err := l.held(tx, runID, shard, worker)
		if err != nil {
			return err
		}
		r, err := getRun(tx, runID)
		if err != nil {
			return err
		}
		now := l.now()
		began := s.ClaimedAt
		if second {
			began = s.Claimed2At
		}
		s.RunMS = float64(now.Sub(began).Microseconds()) / 1000
		s.State = jobs.ShardCommitted
		s.Counts = counts
		s.Cost = p.Cost
		s.Rejects = jobs.CapSample(shard, sample)
		if err := l.storeRejects(tx, runID, shard, sample); err != nil {
			return err
		}
		if p.Profile != "" {
			b, err := tx.CreateBucketIfNotExists(bucketProfiles)
			if err != nil {
				return err
			}
			if err := b.Put(profileKey(runID, shard), []byte(p.Profile)); err != nil {
				return err
			}
		}
		s.Worker, s.LeaseUntil = worker, time.Time{}
		s.Worker2, s.Lease2, s.Claimed2At = "", time.Time{}, time.Time{}
		s.Error = ""
		s.UpdatedAt = now
		if err := putShard(rb, s); err != nil {
			return err
		}
		r.Counts = r.Counts.Add(counts)
		r.UpdatedAt = now
		return putRun(tx, r)
	})
	if err != nil {
		return fmt.Errorf("ledger: complete: %w", err)
	}
	return nil
}

// endAttempt ends worker's lease on a shard. When the other holder of a
// doubly leased shard is alive, only worker's lease ends; else next
// updates the shard. It returns the run's pool when the shard went back to
// pending, for a wake-up.
func (l *Ledger) endAttempt(runID string, shard int, worker string, next func(s *rec)) (string, error) {
	pool := ""
	err := l.db.Update(func(tx *bbolt.Tx) error {
		rb, s, second, err := l.held(tx, runID, shard, worker)
		if err != nil {
			return err
		}
		now := l.now()
		s.UpdatedAt = now
		switch {
		case second:
			s.Worker2, s.Lease2, s.Claimed2At = "", time.Time{}, time.Time{}
			if !s.LeaseUntil.After(now) { // the primary is gone too
				next(&s)
			}
		case s.Worker2 != "" && s.Lease2.After(now):
			s.Worker, s.LeaseUntil, s.ClaimedAt = s.Worker2, s.Lease2, s.Claimed2At
			s.Worker2, s.Lease2, s.Claimed2At = "", time.Time{}, time.Time{}
		default:
			next(&s)
		}
		if s.State == jobs.ShardPending {
			r, err := getRun(tx, runID)
			if err != nil {
				return err
			}
			pool = r.Pool
		}
		return putShard(rb, s)
	})
	if errors.Is(err, ledger.ErrRunFinished) {
		if lerr := l.letGo(runID, shard, worker); lerr != nil {
			return pool, errors.Join(err, lerr)
		}
	}
	return pool, err
}

// letGo clears worker's lease mark on a shard of a cancelled run (see
// ledger.Ledger.SetRunState): the holder stopped.
func (l *Ledger) letGo(runID string, i int, worker string) error {
	return l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getRun(tx, runID)
		if err != nil || r.State != jobs.RunCancelled {
			return err
		}
		rb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		s, err := getShard(rb, runID, i)
		if err != nil || s.State != jobs.ShardFailed {
			return err
		}
		changed := false
		if s.Worker == worker && !s.LeaseUntil.IsZero() {
			s.LeaseUntil, changed = time.Time{}, true
		}
		if s.Worker2 == worker {
			s.Worker2, s.Lease2, s.Claimed2At, changed = "", time.Time{}, time.Time{}, true
		}
		if !changed {
			return nil
		}
		s.UpdatedAt = l.now()
		return putShard(rb, s)
	})
}

// Fail records an attempt's error; the shard goes back to pending when retry
// is set and fewer than maxAttempts attempts were made, else to failed. A
// doubly leased shard keeps running under its other holder.
func (l *Ledger) Fail(ctx context.Context, p ledger.FailParams) error {
	runID, shard, worker, msg, retry, maxAttempts := p.RunID, p.Shard, p.Worker, p.Msg, p.Retry, p.MaxAttempts
	if err := ctx.Err(); err != nil {
		return err
	}
	pool, err := l.endAttempt(runID, shard, worker, func(s *rec) {
		s.Error = msg
		s.Worker, s.LeaseUntil = "", time.Time{}
		s.Worker2, s.Lease2 = "", time.Time{}
		if retry && s.Attempts < maxAttempts {
			s.State = jobs.ShardPending
		} else {
			s.State = jobs.ShardFailed
		}
	})
	if err != nil {
		return fmt.Errorf("ledger: fail: %w", err)
	}
	l.hub.Signal(pool)
	return nil
}

// Release returns the shard to pending and takes back the attempt Claim
// counted.
func (l *Ledger) Release(ctx context.Context, p ledger.ReleaseParams) error {
	runID, shard, worker := p.RunID, p.Shard, p.Worker
	if err := ctx.Err(); err != nil {
		return err
	}
	pool, err := l.endAttempt(runID, shard, worker, func(s *rec) { release(s, l.now()) })
	if err != nil {
		return fmt.Errorf("ledger: release: %w", err)
	}
	l.hub.Signal(pool)
	return nil
}

func release(s *rec, now time.Time) {
	s.State = jobs.ShardPending
	if s.Attempts > 0 {
		s.Attempts--
	}
	s.Worker = ""
	s.LeaseUntil = time.Time{}
	s.Worker2, s.Lease2 = "", time.Time{}
	s.UpdatedAt = now
}

// ReleaseWorker returns every shard leased by worker, in any run, to pending
// without counting the attempt, whether or not its lease has expired. A
// restarted process calls it with the name its dead predecessor used.
// It returns how many shards it released.
func (l *Ledger) ReleaseWorker(ctx context.Context, worker string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := 0
	err := l.db.Update(func(tx *bbolt.Tx) error {
		n = 0
		now := l.now()
		var open [][]byte
		c := tx.Bucket(bucketOpen).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			open = append(open, k)
		}
		for _, k := range open {
			runID := string(k[bytes.LastIndexByte(k, 0)+1:])
			rb, err := runShards(tx, runID)
			if err != nil {
				return err
			}
			var mine []rec
			rc := rb.Bucket(subRunning).Cursor()
			for ik, _ := rc.First(); ik != nil; ik, _ = rc.Next() {
				s, err := getShard(rb, runID, int(binary.BigEndian.Uint32(ik)))
				if err != nil {
					return err
				}
				if s.Worker == worker {
					mine = append(mine, s)
				}
			}
			for _, s := range mine {
				release(&s, now)
				if err := putShard(rb, s); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ledger: release worker %s: %w", worker, err)
	}
	return n, nil
}

// RetryRun is ledger.ErrUnsupported: a failed local run is not reopened;
// `precog run` of the same spec makes a new one (its committed shards are
// aborted with the failed run).
func (l *Ledger) RetryRun(ctx context.Context, runID string) (int, error) {
	r, err := l.Run(ctx, runID)
	if err != nil {
		return 0, err
	}
	if r.State.Terminal() && r.State != jobs.RunFailed {
		return 0, fmt.Errorf("run %s is %s: %w", runID, r.State, ledger.ErrRunFinished)
	}
	return 0, ledger.Unsupported(backend, "reopen run "+runID, "a failed local run is not reopened; `precog run` of the same spec makes a new one")
}

// RetryFailed moves the run's failed shards back to pending with zero
// attempts and no error, so a re-run retries only what failed. The run's
// own state is left to the caller.
func (l *Ledger) RetryFailed(ctx context.Context, runID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := 0
	pool := ""
	err := l.db.Update(func(tx *bbolt.Tx) error {
		n = 0
		r, err := getRun(tx, runID)
		if err != nil {
			return err
		}
		pool = r.Pool
		rb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		var failed []rec
		if err := rb.Bucket(subAll).ForEach(func(k, v []byte) error {
			var s rec
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("run %s shard %d: decode: %w", runID, binary.BigEndian.Uint32(k), err)
			}
			if s.State == jobs.ShardFailed {
				failed = append(failed, s)
			}
			return nil
		}); err != nil {
			return err
		}
		now := l.now()
		for _, s := range failed {
			s.State = jobs.ShardPending
			s.Attempts = 0
			s.Error = ""
			s.Worker = ""
			s.LeaseUntil = time.Time{}
			s.UpdatedAt = now
			if err := putShard(rb, s); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ledger: retry failed shards: %w", err)
	}
	if n > 0 {
		l.hub.Signal(pool)
	}
	return n, nil
}

// Reopen implements ledger.Ledger.
func (l *Ledger) Reopen(ctx context.Context, runID string, shards []int, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pool := ""
	err := l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getRun(tx, runID)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			return fmt.Errorf("run %s is %s: %w", runID, r.State, ledger.ErrRunFinished)
		}
		rb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		now := l.now()
		for _, i := range shards {
			s, err := getShard(rb, runID, i)
			if err != nil {
				return err
			}
			if s.State != jobs.ShardCommitted {
				continue
			}
			r.Counts.RowsIn -= s.Counts.RowsIn
			r.Counts.RowsOut -= s.Counts.RowsOut
			r.Counts.Rejected -= s.Counts.Rejected
			s.State = jobs.ShardPending
			s.Attempts = 0
			s.Counts = jobs.Counts{}
			s.Cost = jobs.Cost{}
			s.RunMS = 0
			s.Error = reason
			s.Worker = ""
			s.LeaseUntil = time.Time{}
			s.UpdatedAt = now
			if err := putShard(rb, s); err != nil {
				return err
			}
		}
		if r.State == jobs.RunPublishing {
			r.State = jobs.RunRunning
		}
		r.UpdatedAt = now
		pool = r.Pool
		if err := tx.Bucket(bucketPublish).Delete([]byte(runID)); err != nil {
			return err
		}
		return putRun(tx, r)
	})
	if err != nil {
		return fmt.Errorf("ledger: reopen shards: %w", err)
	}
	l.hub.Signal(pool)
	return nil
}

// SetRunState moves a non-terminal run to state, recording msg as its error
// message (empty clears it).
func (l *Ledger) SetRunState(ctx context.Context, runID string, state jobs.RunState, msg string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch state {
	case jobs.RunPending, jobs.RunRunning, jobs.RunPublishing, jobs.RunSucceeded, jobs.RunFailed, jobs.RunCancelled:
	default:
		return fmt.Errorf("ledger: set run %s state: unknown state %q", runID, state)
	}
	pool := ""
	err := l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getRun(tx, runID)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			return fmt.Errorf("run %s is %s: %w", runID, r.State, ledger.ErrRunFinished)
		}
		if state == jobs.RunCancelled && r.State == jobs.RunPublishing {
			if p, ok, err := getPublish(tx, runID); err != nil {
				return err
			} else if ok {
				return fmt.Errorf("run %s: worker %s is publishing it: %w", runID, p.Worker, ledger.ErrPublishing)
			}
		}
		if state == jobs.RunCancelled {
			if err := endOpenShards(tx, runID, msg, l.now()); err != nil {
				return err
			}
		}
		r.State = state
		r.Error = msg
		r.UpdatedAt = l.now()
		pool = r.Pool
		if state != jobs.RunPublishing {
			if err := tx.Bucket(bucketPublish).Delete([]byte(runID)); err != nil {
				return err
			}
		}
		if state.Terminal() {
			if err := tx.Bucket(bucketOpen).Delete(openKey(r.Job, r.ParamsKey, r.ID)); err != nil {
				return err
			}
		}
		return putRun(tx, r)
	})
	if err != nil {
		return fmt.Errorf("ledger: set run state %s: %w", strings.ToLower(string(state)), err)
	}
	if state == jobs.RunCancelled || state == jobs.RunFailed {
		l.hub.Signal(pool)
	}
	return nil
}

// endOpenShards moves a cancelled run's pending and running shards to
// failed with msg; a holder's lease mark stays until it lets go.
func endOpenShards(tx *bbolt.Tx, runID, msg string, now time.Time) error {
	rb, err := runShards(tx, runID)
	if err != nil {
		return err
	}
	var open []rec
	for _, name := range [][]byte{subPending, subRunning} {
		c := rb.Bucket(name).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			s, err := getShard(rb, runID, int(binary.BigEndian.Uint32(k)))
			if err != nil {
				return err
			}
			open = append(open, s)
		}
	}
	for _, s := range open {
		s.State, s.Error, s.UpdatedAt = jobs.ShardFailed, msg, now
		if err := putShard(rb, s); err != nil {
			return err
		}
	}
	return nil
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
