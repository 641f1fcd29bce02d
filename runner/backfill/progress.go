package backfill

import (
	"fmt"
	"sync"
	"time"

	"github.com/precog-ml/precog/runner"
)

// RangeProgress folds the progress of the runs of a backfill into one
// runner.Progress for one bar over the whole range. Values not started yet
// are counted at the mean size of the values seen so far, so the total and
// the ETA firm up as the range goes.
type RangeProgress struct {
	mu     sync.Mutex
	name   string
	n      int
	start  time.Time
	runs   map[string]*valueProgress
	nDone  int
	latest string
}

type valueProgress struct {
	p     runner.Progress
	fresh int64 // rows read by this process (resumed shards excluded)
	done  bool
}

// NewRangeProgress starts the progress of a range of values at start.
func NewRangeProgress(name string, values []string, start time.Time) *RangeProgress {
	return &RangeProgress{name: name, n: len(values), start: start, runs: map[string]*valueProgress{}}
}

// value is value's progress record, made on first use. a.mu is held.
func (a *RangeProgress) value(value string) *valueProgress {
	vp := a.runs[value]
	if vp == nil {
		vp = &valueProgress{}
		a.runs[value] = vp
	}
	return vp
}

// Update records value's progress and returns the range's.
func (a *RangeProgress) Update(value string, p runner.Progress, now time.Time) runner.Progress {
	a.mu.Lock()
	defer a.mu.Unlock()
	vp := a.value(value)
	vp.p = p
	vp.fresh = int64(p.Rate * p.Elapsed.Seconds())
	a.latest = value
	return a.snapshot(now)
}

// Finish marks value's run done with its result and returns the range's
// progress.
func (a *RangeProgress) Finish(value string, res runner.Result, now time.Time) runner.Progress {
	a.mu.Lock()
	defer a.mu.Unlock()
	vp := a.value(value) // may be done before its first progress report (already done, or quick)
	vp.fresh = res.RowsThisProcess
	if !vp.done {
		vp.done = true
		a.nDone++
	}
	rows := res.Run.Counts.RowsIn
	vp.p.RowsDone, vp.p.RowsTotal = rows, rows
	vp.p.ShardsDone, vp.p.ShardsTotal = res.Run.Shards, res.Run.Shards
	vp.p.Rejected = res.Run.Counts.Rejected
	return a.snapshot(now)
}

func (a *RangeProgress) snapshot(now time.Time) runner.Progress {
	var out runner.Progress
	var fresh int64 // rows read by this process
	for _, vp := range a.runs {
		out.RowsDone += vp.p.RowsDone
		out.RowsTotal += vp.p.RowsTotal
		out.ShardsDone += vp.p.ShardsDone
		out.ShardsTotal += vp.p.ShardsTotal
		out.Rejected += vp.p.Rejected
		fresh += vp.fresh
	}
	if seen := len(a.runs); seen > 0 && seen < a.n {
		out.RowsTotal += out.RowsTotal / int64(seen) * int64(a.n-seen)
	}
	out.Elapsed = now.Sub(a.start)
	if s := out.Elapsed.Seconds(); s > 0 && fresh > 0 {
		out.Rate = float64(fresh) / s
		out.ETA = time.Duration(float64(out.RowsTotal-out.RowsDone) / out.Rate * float64(time.Second))
	}
	out.RunID = fmt.Sprintf("backfill %d/%d done, latest %s=%s", a.nDone, a.n, a.name, a.latest)
	return out
}
