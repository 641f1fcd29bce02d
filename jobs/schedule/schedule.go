// Package schedule turns a job's cron expression and time zone into fire
// times, and plans which due ticks a scheduler fires or records as missed.
// It is pure and clock-driven: every function takes the time it reasons
// about, so the rules are testable without waiting.
//
// The rules (docs/contracts.md, contract 3, "Schedules"), for wall-clock times the expression
// names in the job's zone:
//   - a named time that a spring-forward change skips fires once, at the
//     first instant after the change; several skipped times fold into that
//     one firing;
//   - a named time that a fall-back change repeats fires once, at its first
//     occurrence;
//   - except that expressions firing every hour or more often (their hour
//     field names all 24 hours: `*`, `*/1`, `0-23`, @hourly) follow elapsed
//     time and fire in both occurrences of a repeated time.
//
// robfig/cron/v3 parses the expression; its own Next is not used across
// zone changes (it skips or duplicates there): the fields are matched
// against wall-clock times, which are then mapped to instants here.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones resolve in minimal containers too

	"github.com/robfig/cron/v3"

	"github.com/precog-ml/precog/jobs"
)

// ErrNoSchedule is returned for a spec without a schedule field.
var ErrNoSchedule = errors.New("schedule: the job has no schedule (add a 5-field cron expression, e.g. schedule: \"0 */4 * * *\")")

// maxOffset bounds how far a zone's wall clock is from UTC (real zones stay
// within -12h..+14h; local mean times of the 19th century within ±16h).
const maxOffset = 26 * time.Hour

// maxScan bounds the loops of Next; reaching it means no fire time exists
// (robfig's matcher itself gives up after five years).
const maxScan = 200_000

// Schedule is a parsed cron expression evaluated in a time zone.
type Schedule struct {
	expr string
	loc  *time.Location
	// fields matches wall-clock times, kept as UTC times whose clock
	// reading is the wall clock of loc (never converted between zones).
	fields *cron.SpecSchedule
	// elapsed: the hour field names all 24 hours, so repeated wall times
	// fire in both occurrences.
	elapsed bool
}

// Parse parses a standard 5-field cron expression (or a descriptor such as
// @daily) evaluated in loc. @every and TZ= prefixes are refused: the spec's
// timezone field is the one source of the zone.
func Parse(expr string, loc *time.Location) (*Schedule, error) {
	if loc == nil {
		return nil, fmt.Errorf("schedule %q: no time zone", expr)
	}
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: time zone prefixes are not supported; use the timezone field", expr)
	}
	parsed, err := cron.ParseStandard(e)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("schedule %q: @every is not supported; use a 5-field cron expression", expr)
	}
	fields := *spec
	fields.Location = time.UTC
	const allHours = 1<<24 - 1
	return &Schedule{expr: expr, loc: loc, fields: &fields, elapsed: fields.Hour&allHours == allHours}, nil
}

// FromSpec builds the schedule of a job spec (schedule and timezone).
func FromSpec(s *jobs.Spec) (*Schedule, error) {
	if s.Schedule == "" {
		return nil, ErrNoSchedule
	}
	loc, err := s.Location()
	if err != nil {
		return nil, fmt.Errorf("timezone %q: %w", s.Timezone, err)
	}
	return Parse(s.Schedule, loc)
}

// Expr is the cron expression as given.
func (s *Schedule) Expr() string { return s.expr }

// Location is the zone the expression is evaluated in.
func (s *Schedule) Location() *time.Location { return s.loc }

// FollowsElapsedTime reports whether repeated wall times fire twice (the
// hour field names every hour).
func (s *Schedule) FollowsElapsedTime() bool { return s.elapsed }

// Next is the first fire time strictly after after, in the schedule's zone;
// the zero time when there is none (an expression such as "0 0 30 2 *").
func (s *Schedule) Next(after time.Time) time.Time {
	var t time.Time
	if s.elapsed {
		t = s.nextElapsed(after)
	} else {
		t = s.nextWall(after)
	}
	if t.IsZero() {
		return t
	}
	return t.In(s.loc)
}

// nextWall: every named wall time w fires at firstReach(w), the first
// instant whose wall clock reads w or later. That is its only occurrence,
// its first one when repeated, and the instant after the change when
// skipped. firstReach is non-decreasing in w, so the first named time from
// after's own wall clock on whose firing lies after after is the answer.
func (s *Schedule) nextWall(after time.Time) time.Time {
	seg := s.segmentAt(after)
	w := wallOf(after, seg.off).Truncate(time.Minute)
	for range maxScan {
		w = s.namedAtOrAfter(w)
		if w.IsZero() {
			return time.Time{}
		}
		if t := s.firstReach(w); t.After(after) {
			return t
		}
		w = w.Add(time.Minute)
	}
	return time.Time{}
}

// nextElapsed walks the zone's periods forward from after: within one
// period the wall clock runs with elapsed time, so every named wall time
// in it fires; at a forward jump, the named times it skips fold into the
// jump's instant.
func (s *Schedule) nextElapsed(after time.Time) time.Time {
	seg := s.segmentAt(after)
	lo := after
	for range maxScan {
		w := s.fields.Next(wallOf(lo, seg.off))
		if w.IsZero() {
			return time.Time{} // nothing named within robfig's five years
		}
		if t := instantOf(w, seg.off); seg.end.IsZero() || t.Before(seg.end) {
			return t
		}
		b := seg.end
		next := s.segmentAt(b)
		if next.off > seg.off {
			// Skipped wall times: [b+old offset, b+new offset).
			if w := s.namedAtOrAfter(wallOf(b, seg.off)); !w.IsZero() && w.Before(wallOf(b, next.off)) {
				return b
			}
		}
		lo, seg = b.Add(-time.Nanosecond), next
	}
	return time.Time{}
}

// firstReach is the first instant whose wall clock reads w or later.
func (s *Schedule) firstReach(w time.Time) time.Time {
	// Before w-maxOffset every wall clock reads less than w.
	seg := s.segmentAt(w.Add(-maxOffset))
	for range 64 {
		if !seg.start.IsZero() && !wallOf(seg.start, seg.off).Before(w) {
			return seg.start // w was skipped (or reached at this period's start)
		}
		if t := instantOf(w, seg.off); seg.end.IsZero() || t.Before(seg.end) {
			return t
		}
		seg = s.segmentAt(seg.end)
	}
	// Unreachable for real zones (a few periods span 2*maxOffset).
	return instantOf(w, seg.off)
}

// namedAtOrAfter is the first wall time at or after w the fields name
// (zero when none within robfig's five-year search).
func (s *Schedule) namedAtOrAfter(w time.Time) time.Time {
	return s.fields.Next(w.Add(-time.Nanosecond))
}

// segment is a period of constant UTC offset of the zone.
type segment struct {
	start, end time.Time // zero: unbounded
	off        int       // seconds east of UTC
}

func (s *Schedule) segmentAt(t time.Time) segment {
	lt := t.In(s.loc)
	_, off := lt.Zone()
	start, end := lt.ZoneBounds()
	return segment{start: start, end: end, off: off}
}

// wallOf is the wall clock at instant t under offset off, as a UTC time.
func wallOf(t time.Time, off int) time.Time {
	return time.Unix(t.Unix()+int64(off), int64(t.Nanosecond())).UTC()
}

// instantOf is the instant whose wall clock under offset off reads w.
func instantOf(w time.Time, off int) time.Time {
	return time.Unix(w.Unix()-int64(off), int64(w.Nanosecond())).UTC()
}
