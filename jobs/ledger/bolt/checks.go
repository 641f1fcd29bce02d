package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// Buckets of the checks before a publish (ledger.Checks), created on first
// write so that a ledger made by an older precog opens unchanged.
var (
	bucketProfiles  = []byte("profiles")  // run id \x00 shard (4 bytes BE) → profile
	bucketReports   = []byte("reports")   // run id → check report JSON
	bucketAccepts   = []byte("accepts")   // run id → Acceptance JSON
	bucketBaselines = []byte("baselines") // job \x00 target → Baseline JSON
)

var _ ledger.Checks = (*Ledger)(nil)

func profileKey(runID string, shard int) []byte {
	k := append([]byte(runID), 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(k[len(runID)+1:], uint32(shard))
	return k
}

// put stores v under key in bucket, creating the bucket.
func (l *Ledger) put(ctx context.Context, bucket, key, v []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put(key, v)
	})
}

// get returns a copy of the value under key in bucket; ErrNotFound when none.
func (l *Ledger) get(ctx context.Context, bucket, key []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []byte
	err := l.db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(bucket); b != nil {
			if v := b.Get(key); v != nil {
				out = append([]byte(nil), v...)
			}
		}
		return nil
	})
	if err == nil && out == nil {
		err = ledger.ErrNotFound
	}
	return out, err
}

// PutShardProfile implements ledger.Checks.
func (l *Ledger) PutShardProfile(ctx context.Context, runID string, shard int, profile string) error {
	if err := l.put(ctx, bucketProfiles, profileKey(runID, shard), []byte(profile)); err != nil {
		return fmt.Errorf("ledger: store profile of shard %d of run %s: %w", shard, runID, err)
	}
	return nil
}

// ShardProfiles implements ledger.Checks.
func (l *Ledger) ShardProfiles(ctx context.Context, runID string) (map[int]string, error) {
	out := map[int]string{}
	prefix := append([]byte(runID), 0)
	err := l.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketProfiles)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && len(k) == len(prefix)+4 && strings.HasPrefix(string(k), string(prefix)); k, v = c.Next() {
			out[int(binary.BigEndian.Uint32(k[len(prefix):]))] = string(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: profiles of run %s: %w", runID, err)
	}
	return out, nil
}

// PutCheckReport implements ledger.Checks.
func (l *Ledger) PutCheckReport(ctx context.Context, runID string, report []byte) error {
	if err := l.put(ctx, bucketReports, []byte(runID), report); err != nil {
		return fmt.Errorf("ledger: store check report of run %s: %w", runID, err)
	}
	return nil
}

// CheckReport implements ledger.Checks.
func (l *Ledger) CheckReport(ctx context.Context, runID string) ([]byte, error) {
	v, err := l.get(ctx, bucketReports, []byte(runID))
	if err != nil {
		return nil, fmt.Errorf("ledger: check report of run %s: %w", runID, err)
	}
	return v, nil
}

// Hold implements ledger.Checks.
func (l *Ledger) Hold(ctx context.Context, runID, msg string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getOpenRun(tx, runID)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketPublish).Delete([]byte(runID)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOpen).Delete(openKey(r.Job, r.ParamsKey, r.ID)); err != nil {
			return err
		}
		r.State, r.Error, r.UpdatedAt = jobs.RunHeld, msg, l.now()
		return putRun(tx, r)
	})
	if err != nil {
		return fmt.Errorf("ledger: hold run %s: %w", runID, err)
	}
	return nil
}

// ResolveHold implements ledger.Checks.
func (l *Ledger) ResolveHold(ctx context.Context, p ledger.ResolveHoldParams) error {
	runID, state, by, reason := p.RunID, p.State, p.By, p.Reason
	if err := p.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	acc, err := json.Marshal(ledger.Acceptance{By: by, Reason: reason, At: l.now()})
	if err != nil {
		return err
	}
	err = l.db.Update(func(tx *bbolt.Tx) error {
		r, err := getRun(tx, runID)
		if err != nil {
			return err
		}
		if r.State != jobs.RunHeld {
			if !r.State.Terminal() {
				return fmt.Errorf("run %s is %s, not held: %w", runID, r.State, ledger.ErrRunOpen)
			}
			return fmt.Errorf("run %s is %s, not held: %w", runID, r.State, ledger.ErrRunFinished)
		}
		b, err := tx.CreateBucketIfNotExists(bucketAccepts)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(runID), acc); err != nil {
			return err
		}
		r.State, r.UpdatedAt = state, l.now()
		if state == jobs.RunSucceeded {
			r.Error = ""
		} else {
			r.Error = "discarded after its checks held it: " + reason
		}
		return putRun(tx, r)
	})
	if err != nil {
		return fmt.Errorf("ledger: resolve held run %s: %w", runID, err)
	}
	return nil
}

// Acceptance implements ledger.Checks.
func (l *Ledger) Acceptance(ctx context.Context, runID string) (ledger.Acceptance, error) {
	var a ledger.Acceptance
	v, err := l.get(ctx, bucketAccepts, []byte(runID))
	if err == nil {
		err = json.Unmarshal(v, &a)
	}
	if err != nil {
		return a, fmt.Errorf("ledger: acceptance of run %s: %w", runID, err)
	}
	return a, nil
}

// PutBaseline implements ledger.Checks.
func (l *Ledger) PutBaseline(ctx context.Context, b ledger.Baseline) error {
	v, err := json.Marshal(b)
	if err == nil {
		err = l.put(ctx, bucketBaselines, []byte(b.Job+"\x00"+b.Target), v)
	}
	if err != nil {
		return fmt.Errorf("ledger: store baseline of %s: %w", b.Job, err)
	}
	return nil
}

// Baseline implements ledger.Checks.
func (l *Ledger) Baseline(ctx context.Context, job, target string) (ledger.Baseline, error) {
	var b ledger.Baseline
	v, err := l.get(ctx, bucketBaselines, []byte(job+"\x00"+target))
	if err == nil {
		err = json.Unmarshal(v, &b)
	}
	if err != nil {
		return b, fmt.Errorf("ledger: baseline of %s: %w", job, err)
	}
	return b, nil
}
