package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
)

// FollowEvery is how often Wait and Watch read the backfill by default.
const FollowEvery = time.Second

// Reader is one read of a backfill for Watch: its view; found is false
// when the id names no backfill; executing is false when nothing can be
// moving it (an embedded ledger that no process holds).
type Reader func(ctx context.Context) (v View, found, executing bool, err error)

// ClusterReader reads backfill id from a shared ledger (Postgres), where
// the pool's workers move it.
func ClusterReader(led Ledger, id string) Reader {
	return func(ctx context.Context) (View, bool, bool, error) {
		v, _, err := Status(ctx, led, id, time.Now())
		if errors.Is(err, ledger.ErrNotFound) {
			return v, false, true, nil
		}
		return v, err == nil, true, err
	}
}

// LocalReader reads backfill id from the embedded ledger under stateDir,
// opened for each read so that it never keeps a precog backfill from
// starting: while a process holds the ledger, from its snapshot (the
// process is executing it).
func LocalReader(stateDir, id string) Reader {
	return func(ctx context.Context) (View, bool, bool, error) {
		led, err := open.Open(ctx, open.Location{StateDir: stateDir}, open.Options{})
		if errors.Is(err, ledger.ErrBusy) {
			s, ok := ReadSnapshot(stateDir)
			if !ok {
				return View{}, false, true, err
			}
			v, found := s.Backfill(id)
			return v, found, true, nil
		}
		if err != nil {
			return View{}, false, false, err
		}
		defer led.Close()
		v, _, err := Status(ctx, led, id, time.Now())
		if errors.Is(err, ledger.ErrNotFound) {
			return v, false, false, nil
		}
		return v, err == nil, false, err
	}
}

// FollowOptions tune Watch and Wait.
type FollowOptions struct {
	// Every is the time between two reads; 0: FollowEvery.
	Every time.Duration
	// OnRead, when set, receives every read; changed is false when only
	// the clock's fields (durations, rate, ETA) moved since the last one.
	OnRead func(v View, changed bool)
}

// InterruptedError ends a Watch of an unfinished backfill of the embedded
// ledger that no process is running: the backfill command resumes it.
type InterruptedError struct{ ID string }

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("backfill %s is interrupted: no precog process is running it; rerun the precog backfill command to resume it", e.ID)
}

// Watch follows backfill id through read until it is done and returns its
// last view: nil error when it succeeded; an error for another terminal
// state, for an id that names no backfill (wrapping ledger.ErrNotFound),
// or, when nothing is executing the open backfill, an *InterruptedError.
// It reads at most once per o.Every until ctx ends.
func Watch(ctx context.Context, read Reader, id string, o FollowOptions) (View, error) {
	every := o.Every
	if every <= 0 {
		every = FollowEvery
	}
	last := ""
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		v, found, executing, err := read(ctx)
		if err != nil {
			return v, err
		}
		if !found {
			return v, fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
		}
		if o.OnRead != nil {
			key := v.changeKey()
			o.OnRead(v, key != last)
			last = key
		}
		state := jobs.RunState(v.State)
		switch {
		case state == jobs.RunSucceeded:
			return v, nil
		case state.Terminal():
			return v, fmt.Errorf("backfill %s %s: %s", v.ID, v.State, v.Error)
		case !executing:
			return v, &InterruptedError{ID: v.ID}
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-t.C:
		}
	}
}

// Wait follows backfill id of a shared ledger, whose workers run it,
// until every value's run ended (Watch's errors); ending ctx stops the
// following, not the backfill.
func Wait(ctx context.Context, led Ledger, id string, o FollowOptions) (View, error) {
	v, err := Watch(ctx, ClusterReader(led, id), id, o)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return v, fmt.Errorf("backfill %s: stopped following (it goes on in the ledger): %w", id, err)
	}
	return v, err
}

// changeKey is v without the clock's fields, to tell a change from time
// passing.
func (v View) changeKey() string {
	c := v
	c.DurationS, c.RowsPerS, c.ETAS = 0, 0, 0
	c.Dates = append([]Date(nil), v.Dates...)
	for i := range c.Dates {
		c.Dates[i].DurationS = 0
	}
	key, _ := json.Marshal(c)
	return string(key)
}

// Ended counts the values whose current run ended.
func (v View) Ended() int {
	n := 0
	for _, d := range v.Dates {
		if jobs.RunState(d.State).Terminal() {
			n++
		}
	}
	return n
}

// Progress is v as one run's progress, for one bar over the backfill.
func (v View) Progress() runner.Progress {
	return runner.Progress{RunID: fmt.Sprintf("backfill %s %s", v.ID, v.State), RowsDone: v.RowsDone, RowsTotal: v.RowsTotal,
		Rejected: v.Rejected, ShardsDone: v.Shards.Committed, ShardsTotal: v.Shards.All(),
		Elapsed: time.Duration(v.DurationS * float64(time.Second)), Rate: v.RowsPerS, ETA: time.Duration(v.ETAS * float64(time.Second))}
}
