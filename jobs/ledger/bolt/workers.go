package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

var (
	_ ledger.Workers = (*Ledger)(nil)
	_ ledger.Rejects = (*Ledger)(nil)
)

// workerRec is a worker as stored: the info plus its lease in a form JSON
// keeps.
type workerRec struct {
	ledger.WorkerInfo
	LeaseNS int64 `json:"lease_ns"`
}

// HeartbeatWorker implements ledger.Workers; it also forgets workers lost
// for ledger.WorkerForget.
func (l *Ledger) HeartbeatWorker(ctx context.Context, w ledger.WorkerInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketWorkers)
		now := l.now()
		rec := workerRec{WorkerInfo: w, LeaseNS: int64(w.Lease)}
		rec.StartedAt = now
		if v := b.Get([]byte(w.ID)); v != nil {
			var old workerRec
			if err := json.Unmarshal(v, &old); err == nil {
				rec.StartedAt = old.StartedAt
			}
		}
		rec.Pool = jobs.PoolOrDefault(rec.Pool)
		rec.HeartbeatAt, rec.Lost, rec.HeartbeatAge = now, false, 0
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		var gone [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			var o workerRec
			if json.Unmarshal(v, &o) == nil && now.Sub(o.HeartbeatAt) > ledger.WorkerForget {
				gone = append(gone, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range gone {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return b.Put([]byte(w.ID), v)
	})
	if err != nil {
		return fmt.Errorf("ledger: heartbeat of worker %s: %w", w.ID, err)
	}
	return nil
}

// RemoveWorker implements ledger.Workers.
func (l *Ledger) RemoveWorker(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketWorkers).Delete([]byte(id)) }); err != nil {
		return fmt.Errorf("ledger: remove worker %s: %w", id, err)
	}
	return nil
}

// ListWorkers implements ledger.Workers, by pool then id.
func (l *Ledger) ListWorkers(ctx context.Context, pool string) ([]ledger.WorkerInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []ledger.WorkerInfo
	err := l.db.View(func(tx *bbolt.Tx) error {
		now := l.now()
		return tx.Bucket(bucketWorkers).ForEach(func(k, v []byte) error {
			var r workerRec
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("worker %s: decode: %w", k, err)
			}
			if pool != "" && r.Pool != pool {
				return nil
			}
			w := r.WorkerInfo
			w.Lease = time.Duration(r.LeaseNS)
			w.HeartbeatAge = now.Sub(w.HeartbeatAt)
			w.Lost = w.HeartbeatAge > w.Lease
			out = append(out, w)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list workers: %w", err)
	}
	// ForEach is by id; order by pool then id.
	sortWorkers(out)
	return out, nil
}

func sortWorkers(ws []ledger.WorkerInfo) {
	for i := 1; i < len(ws); i++ {
		for j := i; j > 0 && (ws[j].Pool < ws[j-1].Pool || ws[j].Pool == ws[j-1].Pool && ws[j].ID < ws[j-1].ID); j-- {
			ws[j], ws[j-1] = ws[j-1], ws[j]
		}
	}
}

func rejectKey(kind byte, shard int) []byte { return append([]byte{kind}, idx(shard)...) }

// storeRejects replaces shard's stored rejects by rs within the run's cap,
// in Complete's transaction.
func (l *Ledger) storeRejects(tx *bbolt.Tx, runID string, shard int, rs []jobs.Reject) error {
	rb, err := tx.Bucket(bucketRejects).CreateBucketIfNotExists([]byte(runID))
	if err != nil {
		return err
	}
	if err := rb.Delete(rejectKey('r', shard)); err != nil {
		return err
	}
	if err := rb.Delete(rejectKey('c', shard)); err != nil {
		return err
	}
	stored := 0
	c := rb.Cursor()
	for k, v := c.Seek([]byte{'c'}); k != nil && k[0] == 'c'; k, v = c.Next() {
		stored += int(binary.BigEndian.Uint64(v))
	}
	limit := l.RejectsPerRun
	if limit <= 0 {
		limit = ledger.DefaultRejectsPerRun
	}
	keep := jobs.SafeRejects(shard, rs, limit-stored)
	if len(keep) == 0 {
		return nil
	}
	v, err := json.Marshal(keep)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(keep)))
	if err := rb.Put(rejectKey('c', shard), n[:]); err != nil {
		return err
	}
	return rb.Put(rejectKey('r', shard), v)
}

// Rejects implements ledger.Rejects: rows of committed shards only.
func (l *Ledger) Rejects(ctx context.Context, runID string, offset, limit int) (ledger.RejectPage, error) {
	page := ledger.RejectPage{Cap: l.RejectsPerRun}
	if page.Cap <= 0 {
		page.Cap = ledger.DefaultRejectsPerRun
	}
	if err := ctx.Err(); err != nil {
		return page, err
	}
	err := l.db.View(func(tx *bbolt.Tx) error {
		sb, err := runShards(tx, runID)
		if err != nil {
			return err
		}
		rb := tx.Bucket(bucketRejects).Bucket([]byte(runID))
		if rb == nil {
			return nil
		}
		c := rb.Cursor()
		for k, v := c.Seek([]byte{'r'}); k != nil && k[0] == 'r'; k, v = c.Next() {
			i := int(binary.BigEndian.Uint32(k[1:]))
			s, err := getShard(sb, runID, i)
			if err != nil {
				return err
			}
			if s.State != jobs.ShardCommitted {
				continue
			}
			var rs []jobs.Reject
			if err := json.Unmarshal(v, &rs); err != nil {
				return fmt.Errorf("run %s shard %d rejects: decode: %w", runID, i, err)
			}
			from := min(max(offset-int(page.Stored), 0), len(rs))
			page.Stored += int64(len(rs))
			if limit > 0 {
				rs = rs[:min(len(rs), from+limit-len(page.Rows))]
			}
			page.Rows = append(page.Rows, rs[min(from, len(rs)):]...)
		}
		return nil
	})
	if err != nil {
		return page, fmt.Errorf("ledger: rejects: %w", err)
	}
	return page, nil
}
