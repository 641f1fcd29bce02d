package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

var _ ledger.Scheduler = (*Ledger)(nil)

type leaderLease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

func tickKey(job string, t time.Time) []byte {
	k := append([]byte(job), 0)
	return binary.BigEndian.AppendUint64(k, uint64(t.UnixNano()))
}

// Lead implements ledger.Scheduler.
func (l *Ledger) Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ok := false
	err := l.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketLeaders)
		now := l.now()
		if v := b.Get([]byte(name)); v != nil {
			var cur leaderLease
			if err := json.Unmarshal(v, &cur); err != nil {
				return fmt.Errorf("decode leader lease %s: %w", name, err)
			}
			if cur.Holder != holder && cur.Until.After(now) {
				return nil
			}
		}
		ok = true
		v, err := json.Marshal(leaderLease{Holder: holder, Until: now.Add(ttl)})
		if err != nil {
			return err
		}
		return b.Put([]byte(name), v)
	})
	if err != nil {
		return false, fmt.Errorf("ledger: lead %s as %s: %w", name, holder, err)
	}
	return ok, nil
}

// Resign implements ledger.Scheduler.
func (l *Ledger) Resign(ctx context.Context, name, holder string) error {
	return l.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketLeaders)
		var cur leaderLease
		if v := b.Get([]byte(name)); v == nil || json.Unmarshal(v, &cur) != nil || cur.Holder != holder {
			return nil
		}
		return b.Delete([]byte(name))
	})
}

// RecordTick implements ledger.Scheduler.
func (l *Ledger) RecordTick(ctx context.Context, t ledger.Tick, run *jobs.Run, shards []jobs.Shard) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.ScheduledFor = t.ScheduledFor.UTC()
	t.RecordedAt = l.now()
	if run != nil {
		t.RunID = run.ID
	}
	var created *jobs.Run
	err := l.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketTicks)
		k := tickKey(t.Job, t.ScheduledFor)
		if b.Get(k) != nil {
			return ledger.ErrTickExists
		}
		v, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if err := b.Put(k, v); err != nil {
			return err
		}
		if run == nil {
			return nil
		}
		r := *run
		r.Pool = jobs.PoolOrDefault(r.Pool)
		r.State, r.Shards, r.Counts, r.UpdatedAt = jobs.RunPending, len(shards), jobs.Counts{}, t.RecordedAt
		if r.CreatedAt.IsZero() {
			r.CreatedAt = t.RecordedAt
		}
		created = &r
		return createRunTx(tx, r, shards, t.RecordedAt)
	})
	if err != nil {
		return fmt.Errorf("ledger: tick %s@%s: %w", t.Job, t.ScheduledFor.Format(time.RFC3339), err)
	}
	if created != nil {
		l.hub.Signal(created.Pool)
	}
	return nil
}

// LastTick implements ledger.Scheduler.
func (l *Ledger) LastTick(ctx context.Context, job string) (ledger.Tick, error) {
	var t ledger.Tick
	found := false
	err := l.db.View(func(tx *bbolt.Tx) error {
		prefix := append([]byte(job), 0)
		c := tx.Bucket(bucketTicks).Cursor()
		// The last key with the prefix: seek past it and step back.
		end := append(append([]byte(nil), prefix...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		k, _ := c.Seek(end)
		var v []byte
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		if k == nil || len(k) != len(prefix)+8 || string(k[:len(prefix)]) != string(prefix) {
			return nil
		}
		found = true
		return json.Unmarshal(v, &t)
	})
	if err != nil {
		return t, fmt.Errorf("ledger: last tick of %s: %w", job, err)
	}
	if !found {
		return ledger.Tick{Job: job}, fmt.Errorf("ledger: no tick of %s: %w", job, ledger.ErrNotFound)
	}
	return t, nil
}

// FirstSeen implements ledger.Scheduler.
func (l *Ledger) FirstSeen(ctx context.Context, job string, at time.Time) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	got := at.UTC()
	err := l.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		if v := b.Get([]byte(job)); len(v) == 8 {
			got = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
			return nil
		}
		return b.Put([]byte(job), binary.BigEndian.AppendUint64(nil, uint64(got.UnixNano())))
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("ledger: first seen of %s: %w", job, err)
	}
	return got, nil
}
