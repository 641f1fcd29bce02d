package schedule

import (
	"fmt"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// Ticks are the fire times in (after, until], oldest first, at most limit
// of them; more reports that there were more before until.
func (s *Schedule) Ticks(after, until time.Time, limit int) (ticks []time.Time, more bool) {
	t := after
	for {
		t = s.Next(t)
		if t.IsZero() || t.After(until) {
			return ticks, false
		}
		if len(ticks) >= limit {
			return ticks, true
		}
		ticks = append(ticks, t)
	}
}

// Interval is the schedule interval that starts at tick: the time from it
// to the next fire time (0 when there is none). It is the default
// starting_deadline of that tick: a tick is late once the next one is due.
func (s *Schedule) Interval(tick time.Time) time.Duration {
	next := s.Next(tick)
	if next.IsZero() {
		return 0
	}
	return next.Sub(tick)
}

// LiveTolerance is how late a tick may be seen and still fire under
// catchup: none. The scheduler wakes at tick times, so a tick seen later
// than this passed while it was down or stalled.
const LiveTolerance = time.Minute

// MaxMissedListed bounds the late ticks Plan lists (a paused minutely job
// would otherwise list thousands).
const MaxMissedListed = 100

// Policy is a job's catch-up policy (spec fields catchup, max_catchup,
// starting_deadline).
type Policy struct {
	Catchup    string // jobs.CatchupNone | CatchupLatest | CatchupAll
	MaxCatchup int    // bounds catchup: all (>= 1)
	// StartingDeadline: a tick seen later than this after its time is
	// missed. 0: one schedule interval (Interval of that tick).
	StartingDeadline time.Duration
}

// PolicyOf is the catch-up policy of a job spec (defaults applied).
func PolicyOf(s *jobs.Spec) Policy {
	return Policy{Catchup: string(s.Catchup), MaxCatchup: int(s.MaxCatchup), StartingDeadline: s.StartingDeadline.Duration}
}

// Decision is what a scheduler does with a job's due ticks.
type Decision struct {
	// Fire are the ticks to fire, oldest first (each one run, unique per
	// (job, tick)).
	Fire []time.Time
	// Missed are ticks to record as missed, oldest first: the first
	// MaxMissedListed late ones, then those the policy passes over.
	Missed []time.Time
	// MissedTruncated: more ticks were late than Missed lists.
	MissedTruncated bool
	// Last is the newest tick handled (fired or missed): the next Plan's
	// last. Equal to the given last when nothing was due.
	Last time.Time
}

// Plan decides which ticks due since last (exclusive) up to now
// (inclusive) fire and which are missed:
//   - a tick older than its starting deadline is missed, whatever the policy;
//   - none: only the newest due tick fires, and only when seen within
//     LiveTolerance (or the deadline, when shorter) of its time; the
//     scheduler does not catch up on ticks that passed while it was down;
//   - latest: the newest due tick within its deadline fires;
//   - all: the newest MaxCatchup due ticks within their deadline fire.
//
// Every other due tick is missed. A zero last means no history: nothing
// before now is due, the job starts with its next tick.
func (s *Schedule) Plan(last, now time.Time, p Policy) (Decision, error) {
	if err := p.check(); err != nil {
		return Decision{}, err
	}
	d := Decision{Last: last}
	if last.IsZero() || !now.After(last) {
		if last.IsZero() {
			d.Last = now
		}
		return d, nil
	}
	// Ticks whose deadline passed are only listed (up to a bound) and
	// counted; the walk then resumes near now, so a job paused for years
	// costs no more than one paused for a day.
	due, onTime := s.dueTicks(last, now, p, &d)
	if len(due) > 0 {
		d.Last = due[len(due)-1]
	}
	keep := 0
	switch p.Catchup {
	case jobs.CatchupAll:
		keep = min(p.MaxCatchup, len(onTime))
	case jobs.CatchupLatest:
		keep = min(1, len(onTime))
	case jobs.CatchupNone:
		if n := len(onTime); n > 0 && now.Sub(onTime[n-1]) <= min(LiveTolerance, s.deadline(onTime[n-1], p)) {
			keep = 1
		}
	}
	d.Fire = append(d.Fire, onTime[len(onTime)-keep:]...)
	d.Missed = append(d.Missed, onTime[:len(onTime)-keep]...)
	return d, nil
}

// dueTicks walks the ticks in (last, now]: the late ones go to d.Missed,
// the ones within their deadline are returned (oldest first) in onTime.
// due is the newest tick (for Last).
func (s *Schedule) dueTicks(last, now time.Time, p Policy, d *Decision) (due, onTime []time.Time) {
	t := last
	for {
		next := s.Next(t)
		if next.IsZero() || next.After(now) {
			return due, onTime
		}
		t = next
		due = append(due[:0], t)
		if now.Sub(t) <= s.deadline(t, p) {
			onTime = append(onTime, t)
			continue
		}
		if len(d.Missed) < MaxMissedListed {
			d.Missed = append(d.Missed, t)
			continue
		}
		// The list is full: jump over the ticks known to be late, so a
		// job paused for years costs no more than one paused for a day.
		d.MissedTruncated = true
		if r := s.lateUntil(t, now, p); r.After(t) {
			t = r
		}
	}
}

// lateUntil is an instant r (>= after) such that every tick up to r is
// late at now.
func (s *Schedule) lateUntil(after, now time.Time, p Policy) time.Time {
	if p.StartingDeadline > 0 {
		return now.Add(-p.StartingDeadline - time.Nanosecond)
	}
	// Default deadline: a tick is late once a later tick is due. Find a
	// window (now-w, now] holding a tick; every tick before it is late.
	for w := time.Hour; now.Add(-w).After(after); w *= 2 {
		if n := s.Next(now.Add(-w)); !n.IsZero() && !n.After(now) {
			return now.Add(-w)
		}
	}
	return after
}

// deadline is how late tick may be seen and still fire.
func (s *Schedule) deadline(tick time.Time, p Policy) time.Duration {
	if p.StartingDeadline > 0 {
		return p.StartingDeadline
	}
	return s.Interval(tick)
}

func (p Policy) check() error {
	switch p.Catchup {
	case jobs.CatchupNone, jobs.CatchupLatest, jobs.CatchupAll:
	default:
		return fmt.Errorf("schedule: catchup must be none, latest or all (got %q)", p.Catchup)
	}
	if p.MaxCatchup < 1 {
		return fmt.Errorf("schedule: max_catchup must be >= 1 (got %d)", p.MaxCatchup)
	}
	if p.StartingDeadline < 0 {
		return fmt.Errorf("schedule: starting_deadline must be >= 0 (got %v)", p.StartingDeadline)
	}
	return nil
}

// Params are the run params of a run fired for tick: date (the tick's date
// in loc, YYYY-MM-DD) and scheduled_for (RFC 3339 in UTC: param values may
// not contain "+", which a zone's offset may).
func Params(tick time.Time, loc *time.Location) map[string]string {
	return map[string]string{
		"date":          tick.In(loc).Format(time.DateOnly),
		"scheduled_for": tick.UTC().Format(time.RFC3339),
	}
}
