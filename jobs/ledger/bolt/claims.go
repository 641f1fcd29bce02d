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
)

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
		r, err := getOpenRun(tx, runID)
		if err != nil {
			return err
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
