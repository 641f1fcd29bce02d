package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/internal/wake"
)

func newHub(l *Ledger) *wake.Hub {
	return wake.New(func() time.Duration { return l.PollInterval }, nil)
}

// Wake implements ledger.Cluster with an in-process broadcast of this
// process's changes; another process's (a cancel, a run of another job)
// are seen at the next poll (PollInterval).
func (l *Ledger) Wake(ctx context.Context, pool string) <-chan struct{} {
	return l.hub.Subscribe(ctx, pool)
}

// candidate is an open run of a pool with its bucket of shards.
type candidate struct {
	run  jobs.Run
	rb   *bbolt.Bucket
	busy int
}

// poolRuns returns pool's open runs in claim order: priority, then fewest
// running shards, then age.
func poolRuns(tx *bbolt.Tx, pool string, states ...jobs.RunState) ([]candidate, error) {
	var out []candidate
	c := tx.Bucket(bucketOpen).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		id := string(k[bytes.LastIndexByte(k, 0)+1:])
		r, err := getRun(tx, id)
		if err != nil {
			return nil, err
		}
		if r.Pool != pool || !slices.Contains(states, r.State) {
			continue
		}
		rb, err := runShards(tx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, candidate{run: r, rb: rb, busy: rb.Bucket(subRunning).Stats().KeyN})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.run.Priority != b.run.Priority:
			return a.run.Priority > b.run.Priority
		case a.busy != b.busy:
			return a.busy < b.busy
		case !a.run.CreatedAt.Equal(b.run.CreatedAt):
			return a.run.CreatedAt.Before(b.run.CreatedAt)
		}
		return a.run.ID < b.run.ID
	})
	return out, nil
}

// ClaimNext implements ledger.Cluster: an expired lease of any candidate
// run first (by priority and age), else a pending shard in claim order,
// else a speculative lease of a straggler.
func (l *Ledger) ClaimNext(ctx context.Context, p ledger.ClaimNextParams) (jobs.Run, jobs.Shard, error) {
	pool, worker, lease, skip := p.Pool, p.Worker, p.Lease, p.Skip
	if err := ctx.Err(); err != nil {
		return jobs.Run{}, jobs.Shard{}, err
	}
	if worker == "" {
		return jobs.Run{}, jobs.Shard{}, errors.New("ledger: claim: empty worker name")
	}
	var run jobs.Run
	var out jobs.Shard
	err := l.db.Update(func(tx *bbolt.Tx) error {
		cands, err := poolRuns(tx, pool, jobs.RunPending, jobs.RunRunning)
		if err != nil {
			return err
		}
		if cands, err = admitted(tx, cands); err != nil {
			return err
		}
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return slices.Contains(skip, c.run.ID) })
		byAge := slices.Clone(cands)
		sort.SliceStable(byAge, func(i, j int) bool {
			if byAge[i].run.Priority != byAge[j].run.Priority {
				return byAge[i].run.Priority > byAge[j].run.Priority
			}
			return byAge[i].run.CreatedAt.Before(byAge[j].run.CreatedAt)
		})
		now := l.now()
		for _, pass := range []struct {
			list    []candidate
			pending bool
		}{{byAge, false}, {cands, true}} {
			for _, c := range pass.list {
				i, err := claimable(c.rb, c.run.ID, now, pass.pending)
				if err != nil {
					return err
				}
				if i >= 0 {
					run = c.run
					out, err = l.lease(tx, c.rb, &run, i, worker, lease)
					return err
				}
			}
		}
		run, out, err = l.speculate(cands, worker, lease)
		return err
	})
	if err != nil {
		return jobs.Run{}, jobs.Shard{}, fmt.Errorf("ledger: claim in pool %s by %s: %w", pool, worker, err)
	}
	return run, out, nil
}

// speculate leases a straggler of a running run with nothing pending to
// worker as a second holder: the shard has run longer than
// ledger.StragglerFactor times the run's median committed shard time.
func (l *Ledger) speculate(cands []candidate, worker string, lease time.Duration) (jobs.Run, jobs.Shard, error) {
	now := l.now()
	for _, c := range cands {
		if c.run.State != jobs.RunRunning {
			continue
		}
		if k, _ := c.rb.Bucket(subPending).Cursor().First(); k != nil {
			continue
		}
		var times []float64
		var running []rec
		if err := c.rb.Bucket(subAll).ForEach(func(_, v []byte) error {
			var s rec
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("run %s: decode shard: %w", c.run.ID, err)
			}
			switch {
			case s.State == jobs.ShardCommitted && s.RunMS > 0:
				times = append(times, s.RunMS)
			case s.State == jobs.ShardRunning:
				running = append(running, s)
			}
			return nil
		}); err != nil {
			return jobs.Run{}, jobs.Shard{}, err
		}
		if len(times) == 0 {
			continue
		}
		med := median(times)
		sort.Slice(running, func(i, j int) bool { return running[i].ClaimedAt.Before(running[j].ClaimedAt) })
		for _, s := range running {
			age := float64(now.Sub(s.ClaimedAt).Microseconds()) / 1000
			if s.Worker2 != "" || s.Worker == worker || !s.LeaseUntil.After(now) || age <= med*ledger.StragglerFactor {
				continue
			}
			s.Attempts++
			s.Worker2, s.Lease2, s.Claimed2At = worker, now.Add(lease), now
			s.UpdatedAt = now
			if err := putShard(c.rb, s); err != nil {
				return jobs.Run{}, jobs.Shard{}, err
			}
			out := s.Shard
			out.Worker, out.LeaseUntil, out.Speculative = worker, s.Lease2, true
			return c.run, out, nil
		}
	}
	return jobs.Run{}, jobs.Shard{}, ledger.ErrNoShard
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
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
		if r, err = getRun(tx, runID); err != nil {
			return err
		}
		if r.State.Terminal() {
			return fmt.Errorf("run %s is %s: %w", runID, r.State, ledger.ErrRunFinished)
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
