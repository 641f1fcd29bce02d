package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// Backoff of a run a worker cannot execute: the first pass-over lasts
// unableBase (half of it jittered), doubling per failed retry up to
// unableMax. A retry finds out whether the cause went away (a model file
// copied in, a database back).
const (
	unableBase = 10 * time.Second
	unableMax  = 5 * time.Minute
	// maxUnable bounds the runs remembered; the oldest mark goes first.
	maxUnable = 64
)

// unableRuns are the runs this worker found it cannot execute (their spec,
// model or sinks do not load here: a variable not set, a model file
// missing). The worker passes over their shards until each one's backoff
// ends, lists them in the ledger's worker list (`precog workers`, the run's
// status) and in its readiness, and forgets a run once it opens, ends or
// is gone. Other workers of the pool run its shards meanwhile.
type unableRuns struct {
	mu   sync.Mutex
	runs map[string]*unableRun
}

type unableRun struct {
	ledger.Unable
	tries int
	until time.Time
}

func newUnableRuns() *unableRuns { return &unableRuns{runs: map[string]*unableRun{}} }

// mark records that run cannot be executed here because of err and returns
// how long its shards are passed over.
func (u *unableRuns) mark(run jobs.Run, err error, now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, ok := u.runs[run.ID]
	if !ok {
		if len(u.runs) >= maxUnable {
			u.dropOldest()
		}
		r = &unableRun{Unable: ledger.Unable{Run: run.ID, Job: run.Job, Since: now.UTC()}}
		u.runs[run.ID] = r
	}
	r.Reason = err.Error()
	full := min(unableBase<<min(r.tries, 10), unableMax)
	wait := full/2 + retry.Policy{Base: full, Max: full}.Delay(0)/2
	r.tries++
	r.until = now.Add(wait)
	return wait
}

func (u *unableRuns) dropOldest() {
	var oldest *unableRun
	for _, r := range u.runs {
		if oldest == nil || r.Since.Before(oldest.Since) {
			oldest = r
		}
	}
	if oldest != nil {
		delete(u.runs, oldest.Run)
	}
}

// clear forgets run (it opened here).
func (u *unableRuns) clear(runID string) {
	u.mu.Lock()
	delete(u.runs, runID)
	u.mu.Unlock()
}

// skipping lists the runs whose backoff has not ended, for ClaimNext (ClaimNextParams.Skip).
func (u *unableRuns) skipping(now time.Time) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for id, r := range u.runs {
		if now.Before(r.until) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// wait is how long run's shards are still passed over (0: not at all).
func (u *unableRuns) wait(runID string, now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r, ok := u.runs[runID]; ok && now.Before(r.until) {
		return r.until.Sub(now)
	}
	return 0
}

// nextRetry is when the first backoff ends (zero when none is running).
func (u *unableRuns) nextRetry(now time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	var next time.Time
	for _, r := range u.runs {
		if now.Before(r.until) && (next.IsZero() || r.until.Before(next)) {
			next = r.until
		}
	}
	return next
}

// list is what the worker reports, by run id.
func (u *unableRuns) list() []ledger.Unable {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]ledger.Unable, 0, len(u.runs))
	for _, r := range u.runs {
		out = append(out, r.Unable)
	}
	slices.SortFunc(out, func(a, b ledger.Unable) int { return strings.Compare(a.Run, b.Run) })
	return out
}

// prune forgets runs that ended or are gone from the ledger.
func (u *unableRuns) prune(ctx context.Context, led ledger.Ledger) {
	for _, r := range u.list() {
		run, err := led.Run(ctx, r.Run)
		if errors.Is(err, ledger.ErrNotFound) || err == nil && run.State.Terminal() {
			u.clear(r.Run)
		}
	}
}

// err is the readiness error while runs are listed (nil when none).
func (u *unableRuns) err() error {
	l := u.list()
	if len(l) == 0 {
		return nil
	}
	parts := make([]string, 0, len(l))
	for _, r := range l {
		parts = append(parts, fmt.Sprintf("run %s of job %s: %s", r.Run, r.Job, r.Reason))
	}
	return fmt.Errorf("cannot execute %d run(s), passed over for other workers: %s", len(l), strings.Join(parts, "; "))
}
