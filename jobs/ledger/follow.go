// Following a run: the polling that `submit --wait` and `status --watch`
// use, with a recent rows-per-second rate.

package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// RunReader is the part of a ledger that following a run needs.
type RunReader interface {
	Run(ctx context.Context, id string) (jobs.Run, error)
	Shards(ctx context.Context, runID string) ([]jobs.Shard, error)
}

// RunSnapshot is one poll of a followed run.
type RunSnapshot struct {
	Run    jobs.Run
	Shards []jobs.Shard
	At     time.Time
	// Rate is the recent rows per second (RateWindow), 0 until two polls
	// are apart.
	Rate float64
}

// RateWindow is the span over which a followed run's rate is measured:
// long enough to smooth the steps of shards committing, short enough to
// follow a pool that grows or shrinks.
const RateWindow = 30 * time.Second

// Rate measures rows per second over the last RateWindow of samples.
type Rate struct {
	samples []sample
}

type sample struct {
	at   time.Time
	rows int64
}

// Add records the rows done at time at. A count that went down (shards
// reopened) restarts the measure.
func (r *Rate) Add(at time.Time, rows int64) {
	if n := len(r.samples); n > 0 && rows < r.samples[n-1].rows {
		r.samples = r.samples[:0]
	}
	r.samples = append(r.samples, sample{at, rows})
	// Keep one sample older than the window, so the window is spanned.
	for len(r.samples) > 2 && at.Sub(r.samples[1].at) >= RateWindow {
		r.samples = r.samples[1:]
	}
}

// PerSecond is the rate over the samples kept (0 with fewer than two).
func (r *Rate) PerSecond() float64 {
	if len(r.samples) < 2 {
		return 0
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	d := last.at.Sub(first.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(last.rows-first.rows) / d
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// Every is the poll interval (default 500ms).
	Every time.Duration
	// Tolerate is how long polls may fail in a row (the database
	// restarting) before Follow gives up (default 1m).
	Tolerate time.Duration
	// OnPoll receives every snapshot, the terminal one included.
	OnPoll func(RunSnapshot)
	// OnError is told of a failed poll that is tolerated.
	OnError func(error)
}

// Follow polls run id until it is terminal and returns it; ctx ending
// returns ctx's error (the run keeps going wherever it runs). ErrNotFound
// is returned at once.
func Follow(ctx context.Context, r RunReader, id string, o FollowOptions) (jobs.Run, error) {
	if o.Every <= 0 {
		o.Every = 500 * time.Millisecond
	}
	if o.Tolerate <= 0 {
		o.Tolerate = time.Minute
	}
	var rate Rate
	var failingSince time.Time
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		snap, err := poll(ctx, r, id)
		switch {
		case err == nil:
			failingSince = time.Time{}
			rate.Add(snap.At, snap.Run.Counts.RowsIn)
			snap.Rate = rate.PerSecond()
			if o.OnPoll != nil {
				o.OnPoll(snap)
			}
			if snap.Run.State.Terminal() {
				return snap.Run, nil
			}
		case ctx.Err() != nil:
			return jobs.Run{}, ctx.Err()
		case errors.Is(err, ErrNotFound):
			return jobs.Run{}, err
		default:
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if time.Since(failingSince) > o.Tolerate {
				return jobs.Run{}, fmt.Errorf("follow run %s: the ledger failed for %s: %w", id, o.Tolerate, err)
			}
			if o.OnError != nil {
				o.OnError(err)
			}
		}
		select {
		case <-ctx.Done():
			return jobs.Run{}, ctx.Err()
		case <-t.C:
		}
	}
}

func poll(ctx context.Context, r RunReader, id string) (RunSnapshot, error) {
	run, err := r.Run(ctx, id)
	if err != nil {
		return RunSnapshot{}, err
	}
	shards, err := r.Shards(ctx, id)
	if err != nil {
		return RunSnapshot{}, err
	}
	return RunSnapshot{Run: run, Shards: shards, At: time.Now()}, nil
}
