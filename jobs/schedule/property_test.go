package schedule

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/precog-ml/precog/jobs"
)

// reference lists the fire times in [from, to) by walking every minute and
// applying the rules literally: a minute whose wall clock is named fires,
// unless (outside elapsed-time mode) that wall clock was already read
// before; at a forward jump, named wall clocks that were jumped over fire
// at the jump. It shares nothing with Next but robfig's parser.
func reference(t testing.TB, expr string, loc *time.Location, from, to time.Time) []time.Time {
	parsed, err := cron.ParseStandard(expr)
	if err != nil {
		t.Fatal(err)
	}
	spec := parsed.(*cron.SpecSchedule)
	const allHours = 1<<24 - 1
	elapsed := spec.Hour&allHours == allHours
	named := func(w time.Time) bool { // w: a wall clock as a UTC time
		dom := spec.Dom&(1<<uint(w.Day())) != 0
		dow := spec.Dow&(1<<uint(w.Weekday())) != 0
		day := dom || dow
		if spec.Dom&(1<<63) != 0 || spec.Dow&(1<<63) != 0 {
			day = dom && dow
		}
		return spec.Minute&(1<<uint(w.Minute())) != 0 && spec.Hour&(1<<uint(w.Hour())) != 0 &&
			spec.Month&(1<<uint(w.Month())) != 0 && day
	}
	wall := func(t time.Time) time.Time {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	var out []time.Time
	start := from.Add(-48 * time.Hour) // warm up the high-water mark
	high := wall(start)
	prev := high
	for t := start.Add(time.Minute); t.Before(to); t = t.Add(time.Minute) {
		w := wall(t)
		fire := false
		if w.Sub(prev) > time.Minute { // a jump forward: prev+1m .. w-1m were skipped
			for s := prev.Add(time.Minute); s.Before(w); s = s.Add(time.Minute) {
				if named(s) && s.After(high) {
					fire = true
				}
			}
		}
		if named(w) && (elapsed || w.After(high)) {
			fire = true
		}
		if fire && !t.Before(from) {
			out = append(out, t)
		}
		if w.After(high) {
			high = w
		}
		prev = w
	}
	return out
}

// TestNextMatchesReference compares Next with the minute-by-minute
// reference over a year in eight zones (30- and 45-minute offsets and
// shifts, changes at midnight, Morocco's Ramadan changes).
func TestNextMatchesReference(t *testing.T) {
	zones := []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago",
		"Pacific/Chatham", "Africa/Casablanca", "America/Havana", "Asia/Kolkata"}
	exprs := []string{"30 2 * * *", "0 1 * * *", "*/15 * * * *", "0 * * * *", "15 1,2 * * *", "0 0 * * 0", "45 23,0 * * *", "*/20 0-3 * * *", "0 0 1 * *"}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(1, 0, 0)
	if testing.Short() {
		zones, exprs = zones[:3], exprs[:4]
	}
	for _, zone := range zones {
		loc := mustLoc(t, zone)
		for _, expr := range exprs {
			s := mustParse(t, expr, zone)
			want := reference(t, expr, loc, from, to)
			var got []time.Time
			for x := s.Next(from.Add(-time.Nanosecond)); !x.IsZero() && x.Before(to); x = s.Next(x) {
				got = append(got, x)
			}
			if len(got) != len(want) {
				t.Errorf("%s %q: %d fire times, reference %d", zone, expr, len(got), len(want))
			}
			for i := range min(len(got), len(want)) {
				if !got[i].Equal(want[i]) {
					t.Errorf("%s %q: fire %d at %v, reference %v", zone, expr, i, got[i].In(loc), want[i].In(loc))
					break
				}
			}
		}
	}
}

// FuzzNext: any expression the parser takes, in any zone, from any
// instant: Next never panics and is strictly increasing.
func FuzzNext(f *testing.F) {
	f.Add("30 2 * * *", "America/New_York", int64(1772953200), uint8(20))
	f.Add("*/15 * * * *", "Australia/Lord_Howe", int64(1775311200), uint8(20))
	f.Add("0 0 29 2 *", "Pacific/Apia", int64(1325000000), uint8(5))
	f.Add("15 1,2 * * 0", "Europe/London", int64(0), uint8(10))
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Pacific/Apia",
		"Pacific/Chatham", "Africa/Casablanca", "America/Santiago", "Asia/Kathmandu", "Europe/Dublin"}
	f.Fuzz(func(t *testing.T, expr, zone string, unix int64, n uint8) {
		loc, err := time.LoadLocation(zone)
		if err != nil || zone == "" || zone == "Local" {
			loc, _ = time.LoadLocation(zones[uint64(unix)%uint64(len(zones))])
		}
		s, err := Parse(expr, loc)
		if err != nil {
			return
		}
		at := time.Unix(unix%(1<<35), 0) // years 880..3058
		for range n % 50 {
			next := s.Next(at)
			if next.IsZero() {
				return
			}
			if !next.After(at) {
				t.Fatalf("%q in %s: Next(%v) = %v, not after", expr, loc, at, next)
			}
			at = next
		}
	})
}

func TestParamsAreValidRunParams(t *testing.T) {
	for _, zone := range []string{"Asia/Kolkata", "America/New_York", "Pacific/Chatham"} {
		loc := mustLoc(t, zone)
		for k, v := range Params(time.Date(2026, 6, 1, 12, 0, 0, 0, loc), loc) {
			if err := jobs.ValidateParam(k, v); err != nil {
				t.Errorf("%s: %v", zone, err)
			}
		}
	}
}
