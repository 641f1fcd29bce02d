package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

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
		r, err := getOpenRun(tx, runID)
		if err != nil {
			return err
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

// Reopen implements ledger.Ledger.
func (l *Ledger) Reopen(ctx context.Context, runID string, shards []int, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pool := ""
	err := l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getOpenRun(tx, runID)
		if err != nil {
			return err
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

// publishLease is who holds a run's publish step, and until when.
type publishLease struct {
	Worker string    `json:"worker"`
	Until  time.Time `json:"until"`
}

func getPublish(tx *bbolt.Tx, runID string) (publishLease, bool, error) {
	var p publishLease
	v := tx.Bucket(bucketPublish).Get([]byte(runID))
	if v == nil {
		return p, false, nil
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return p, false, fmt.Errorf("run %s: decode publish lease: %w", runID, err)
	}
	return p, true, nil
}

// allCommitted reports whether every shard of the run is committed.
func allCommitted(tx *bbolt.Tx, runID string) (bool, error) {
	rb, err := runShards(tx, runID)
	if err != nil {
		return false, err
	}
	if k, _ := rb.Bucket(subPending).Cursor().First(); k != nil {
		return false, nil
	}
	if k, _ := rb.Bucket(subRunning).Cursor().First(); k != nil {
		return false, nil
	}
	ok := true
	err = rb.Bucket(subAll).ForEach(func(k, v []byte) error {
		var s jobs.Shard
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("run %s shard %d: decode: %w", runID, binary.BigEndian.Uint32(k), err)
		}
		if s.State != jobs.ShardCommitted {
			ok = false
		}
		return nil
	})
	return ok, err
}

// ClaimPublish implements ledger.Cluster.
func (l *Ledger) ClaimPublish(ctx context.Context, p ledger.PublishLeaseParams) (jobs.Run, error) {
	runID, worker, lease := p.RunID, p.Worker, p.Lease
	if err := ctx.Err(); err != nil {
		return jobs.Run{}, err
	}
	if worker == "" {
		return jobs.Run{}, errors.New("ledger: claim publish: empty worker name")
	}
	var r jobs.Run
	err := l.db.Update(func(tx *bbolt.Tx) error {
		var err error
		if r, err = getOpenRun(tx, runID); err != nil {
			return err
		}
		now := l.now()
		if p, ok, err := getPublish(tx, runID); err != nil {
			return err
		} else if ok && p.Until.After(now) {
			return fmt.Errorf("run %s: publish held by %s: %w", runID, p.Worker, ledger.ErrNoShard)
		}
		if ok, err := allCommitted(tx, runID); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("run %s: shards not all committed: %w", runID, ledger.ErrNoShard)
		}
		v, err := json.Marshal(publishLease{Worker: worker, Until: now.Add(lease)})
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketPublish).Put([]byte(runID), v); err != nil {
			return err
		}
		r.State, r.UpdatedAt = jobs.RunPublishing, now
		return putRun(tx, r)
	})
	if err != nil {
		return r, fmt.Errorf("ledger: claim publish by %s: %w", worker, err)
	}
	return r, nil
}

// publishHeld checks inside tx that worker holds a live publish lease.
func (l *Ledger) publishHeld(tx *bbolt.Tx, runID, worker string) (jobs.Run, error) {
	r, err := getRun(tx, runID)
	if err != nil {
		return r, err
	}
	if r.State.Terminal() {
		return r, fmt.Errorf("run %s, worker %s: the run is %s: %w (%w)", runID, worker, r.State, ledger.ErrRunFinished, ledger.ErrLeaseLost)
	}
	p, ok, err := getPublish(tx, runID)
	if err != nil {
		return r, err
	}
	if r.State != jobs.RunPublishing || !ok || p.Worker != worker || !p.Until.After(l.now()) {
		return r, fmt.Errorf("run %s, worker %s: run is %s, publish held by %q: %w", runID, worker, r.State, p.Worker, ledger.ErrLeaseLost)
	}
	return r, nil
}

// HeartbeatPublish implements ledger.Cluster.
func (l *Ledger) HeartbeatPublish(ctx context.Context, p ledger.PublishLeaseParams) error {
	runID, worker, lease := p.RunID, p.Worker, p.Lease
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		if _, err := l.publishHeld(tx, runID, worker); err != nil {
			return err
		}
		v, err := json.Marshal(publishLease{Worker: worker, Until: l.now().Add(lease)})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketPublish).Put([]byte(runID), v)
	})
	if err != nil {
		return fmt.Errorf("ledger: heartbeat publish: %w", err)
	}
	return nil
}

// FinishPublish implements ledger.Cluster.
func (l *Ledger) FinishPublish(ctx context.Context, p ledger.FinishPublishParams) error {
	runID, worker, state, msg := p.RunID, p.Worker, p.State, p.Msg
	if err := ctx.Err(); err != nil {
		return err
	}
	if !state.Terminal() {
		return fmt.Errorf("ledger: finish publish of run %s by %s: state %q is not terminal", runID, worker, state)
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		r, err := l.publishHeld(tx, runID, worker)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketPublish).Delete([]byte(runID)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOpen).Delete(openKey(r.Job, r.ParamsKey, r.ID)); err != nil {
			return err
		}
		r.State, r.Error, r.UpdatedAt = state, msg, l.now()
		return putRun(tx, r)
	})
	if err != nil {
		return fmt.Errorf("ledger: finish publish: %w", err)
	}
	return nil
}

// PublishDue implements ledger.Cluster.
func (l *Ledger) PublishDue(ctx context.Context, pool string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ids []string
	err := l.db.View(func(tx *bbolt.Tx) error {
		cands, err := poolRuns(tx, pool, jobs.RunPending, jobs.RunRunning, jobs.RunPublishing)
		if err != nil {
			return err
		}
		sort.SliceStable(cands, func(i, j int) bool {
			if cands[i].run.Priority != cands[j].run.Priority {
				return cands[i].run.Priority > cands[j].run.Priority
			}
			return cands[i].run.CreatedAt.Before(cands[j].run.CreatedAt)
		})
		now := l.now()
		for _, c := range cands {
			if p, ok, err := getPublish(tx, c.run.ID); err != nil {
				return err
			} else if ok && p.Until.After(now) {
				continue
			}
			if ok, err := allCommitted(tx, c.run.ID); err != nil {
				return err
			} else if ok {
				ids = append(ids, c.run.ID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: runs due to publish in pool %s: %w", pool, err)
	}
	return ids, nil
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
