package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// Backfill buckets, created by the first backfill (a ledger without any
// reads them as empty).
var (
	bucketBackfills   = []byte("backfills")    // backfill id → ledger.Backfill JSON, dates included
	bucketBackfillRun = []byte("backfill_run") // run id → backfill id \x00 value (the newest backfill)
)

var _ ledger.Backfills = (*Ledger)(nil)

func getBackfill(tx *bbolt.Tx, id string) (ledger.Backfill, error) {
	var b ledger.Backfill
	bk := tx.Bucket(bucketBackfills)
	var v []byte
	if bk != nil {
		v = bk.Get([]byte(id))
	}
	if v == nil {
		return b, fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
	}
	if err := json.Unmarshal(v, &b); err != nil {
		return b, fmt.Errorf("backfill %s: decode: %w", id, err)
	}
	return b, nil
}

func putBackfill(tx *bbolt.Tx, b ledger.Backfill) error {
	bk, err := tx.CreateBucketIfNotExists(bucketBackfills)
	if err != nil {
		return err
	}
	v, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("backfill %s: encode: %w", b.ID, err)
	}
	return bk.Put([]byte(b.ID), v)
}

// CreateBackfill implements ledger.Backfills.
func (l *Ledger) CreateBackfill(ctx context.Context, b ledger.Backfill, runs []ledger.BackfillRun) error {
	if b.ID == "" || b.Parallel < 1 {
		return fmt.Errorf("ledger: create backfill %q: need an id and parallel >= 1 (got %d)", b.ID, b.Parallel)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.now()
	if b.CreatedAt.IsZero() {
		b.CreatedAt = now
	}
	b.UpdatedAt, b.Dates = now, nil
	b.Pool = jobs.PoolOrDefault(b.Pool)
	err := l.db.Update(func(tx *bbolt.Tx) error {
		if _, err := getBackfill(tx, b.ID); err == nil {
			return fmt.Errorf("backfill %s already exists", b.ID)
		}
		return l.addBackfillRuns(tx, b, runs)
	})
	if err != nil {
		return fmt.Errorf("ledger: create backfill %s: %w", b.ID, err)
	}
	l.hub.Signal(b.Pool)
	return nil
}

// AddBackfillRuns implements ledger.Backfills.
func (l *Ledger) AddBackfillRuns(ctx context.Context, id string, runs []ledger.BackfillRun) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var pool string
	err := l.db.Update(func(tx *bbolt.Tx) error {
		b, err := getBackfill(tx, id)
		if err != nil {
			return err
		}
		pool = b.Pool
		b.UpdatedAt = l.now()
		return l.addBackfillRuns(tx, b, runs)
	})
	if err != nil {
		return fmt.Errorf("ledger: add runs to backfill %s: %w", id, err)
	}
	l.hub.Signal(pool)
	return nil
}

// addBackfillRuns creates (or attaches) runs inside tx and records them as
// their values' current runs in b, which it stores.
func (l *Ledger) addBackfillRuns(tx *bbolt.Tx, b ledger.Backfill, runs []ledger.BackfillRun) error {
	idx, err := tx.CreateBucketIfNotExists(bucketBackfillRun)
	if err != nil {
		return err
	}
	for _, br := range runs {
		if br.Attach {
			if _, err := getRun(tx, br.Run.ID); err != nil {
				return err
			}
		} else if err := l.createChild(tx, br.Run, br.Shards); err != nil {
			return err
		}
		i := slices.IndexFunc(b.Dates, func(d ledger.BackfillDate) bool { return d.Value == br.Value })
		if i < 0 {
			b.Dates = append(b.Dates, ledger.BackfillDate{Value: br.Value})
			i = len(b.Dates) - 1
		}
		b.Dates[i].Runs = append(b.Dates[i].Runs, br.Run.ID)
		if err := idx.Put([]byte(br.Run.ID), []byte(b.ID+"\x00"+br.Value)); err != nil {
			return err
		}
	}
	return putBackfill(tx, b)
}

// Backfill implements ledger.Backfills.
func (l *Ledger) Backfill(ctx context.Context, id string) (ledger.Backfill, error) {
	var b ledger.Backfill
	err := l.db.View(func(tx *bbolt.Tx) error {
		var err error
		b, err = getBackfill(tx, id)
		return err
	})
	if err != nil {
		return b, fmt.Errorf("ledger: %w", err)
	}
	return b, nil
}

// Backfills implements ledger.Backfills.
func (l *Ledger) Backfills(ctx context.Context, job string, limit int) ([]ledger.Backfill, error) {
	var out []ledger.Backfill
	err := l.db.View(func(tx *bbolt.Tx) error {
		bk := tx.Bucket(bucketBackfills)
		if bk == nil {
			return nil
		}
		return bk.ForEach(func(k, v []byte) error {
			var b ledger.Backfill
			if err := json.Unmarshal(v, &b); err != nil {
				return fmt.Errorf("backfill %s: decode: %w", k, err)
			}
			if job == "" || b.Job == job {
				out = append(out, b)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: backfills of %q: %w", job, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// BackfillOf implements ledger.Backfills.
func (l *Ledger) BackfillOf(ctx context.Context, runID string) (string, string, error) {
	var v []byte
	err := l.db.View(func(tx *bbolt.Tx) error {
		if bk := tx.Bucket(bucketBackfillRun); bk != nil {
			v = bytes.Clone(bk.Get([]byte(runID)))
		}
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("ledger: backfill of run %s: %w", runID, err)
	}
	if v == nil {
		return "", "", fmt.Errorf("ledger: backfill of run %s: %w", runID, ledger.ErrNotFound)
	}
	id, value, _ := bytes.Cut(v, []byte{0})
	return string(id), string(value), nil
}

// SetBackfill implements ledger.Backfills.
func (l *Ledger) SetBackfill(ctx context.Context, id string, parallel int, cancelled bool) error {
	if parallel < 1 {
		return fmt.Errorf("ledger: set backfill %s: parallel must be >= 1 (got %d)", id, parallel)
	}
	var pool string
	err := l.db.Update(func(tx *bbolt.Tx) error {
		b, err := getBackfill(tx, id)
		if err != nil {
			return err
		}
		b.Parallel, b.Cancelled, b.UpdatedAt, pool = parallel, cancelled, l.now(), b.Pool
		return putBackfill(tx, b)
	})
	if err != nil {
		return fmt.Errorf("ledger: set backfill %s: %w", id, err)
	}
	l.hub.Signal(pool)
	return nil
}

// RetryBackfillRun implements ledger.Backfills: ErrUnsupported, as
// RetryRun (a failed value of a local backfill gets a new run).
func (l *Ledger) RetryBackfillRun(ctx context.Context, id, runID string) (int, error) {
	return 0, ledger.Unsupported(backend, "reopen run "+runID+" of backfill "+id, "a failed value of a local backfill gets a new run")
}

// admitted drops from cands the pending runs of backfills that may not
// start yet: a backfill admits its waiting runs in value order while fewer
// than Parallel of its runs are running or publishing, none once it is
// cancelled. (bbolt serialises writers, so counting here is race-free.)
func admitted(tx *bbolt.Tx, cands []candidate) ([]candidate, error) {
	idx := tx.Bucket(bucketBackfillRun)
	if idx == nil {
		return cands, nil
	}
	allowed := map[string]map[string]bool{} // backfill id → runs that may start
	out := cands[:0:0]
	for _, c := range cands {
		v := idx.Get([]byte(c.run.ID))
		if c.run.State != jobs.RunPending || v == nil {
			out = append(out, c)
			continue
		}
		id, _, _ := bytes.Cut(v, []byte{0})
		ok, seen := allowed[string(id)]
		if !seen {
			b, err := getBackfill(tx, string(id))
			if err != nil {
				return nil, err
			}
			if ok, err = startable(tx, b); err != nil {
				return nil, err
			}
			allowed[string(id)] = ok
		}
		if ok[c.run.ID] {
			out = append(out, c)
		}
	}
	return out, nil
}

// startable is the set of b's pending current runs that may start now.
func startable(tx *bbolt.Tx, b ledger.Backfill) (map[string]bool, error) {
	out := map[string]bool{}
	if b.Cancelled {
		return out, nil
	}
	busy := 0
	var waiting []string
	for _, d := range b.Dates {
		for _, id := range d.Runs {
			r, err := getRun(tx, id)
			if errors.Is(err, ledger.ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
			switch r.State {
			case jobs.RunRunning, jobs.RunPublishing:
				busy++
			case jobs.RunPending:
				waiting = append(waiting, id)
			}
		}
	}
	for _, id := range waiting[:max(0, min(len(waiting), b.Parallel-busy))] {
		out[id] = true
	}
	return out, nil
}

// createChild creates a backfill's child run inside tx as CreateRun would.
func (l *Ledger) createChild(tx *bbolt.Tx, run jobs.Run, shards []jobs.Shard) error {
	if run.ID == "" {
		return errors.New("empty run id")
	}
	now := l.now()
	run.Pool = jobs.PoolOrDefault(run.Pool)
	run.State, run.Shards, run.Counts = jobs.RunPending, len(shards), jobs.Counts{}
	if run.CreatedAt.IsZero() {
		run.CreatedAt = now
	}
	run.UpdatedAt = now
	return createRunTx(tx, run, shards, now)
}
