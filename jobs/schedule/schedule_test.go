package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustParse(t testing.TB, expr, zone string) *Schedule {
	t.Helper()
	s, err := Parse(expr, mustLoc(t, zone))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// next lists n fire times after from (RFC 3339), formatted as `schedule next` prints them.
func next(s *Schedule, from time.Time, n int) []string {
	var out []string
	for t := from; len(out) < n; {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t.Format(time.RFC3339))
	}
	return out
}

// TestDSTRules pins the rules across the 2026 and 2027 transitions of New
// York, London and Lord Howe (a 30-minute shift).
func TestDSTRules(t *testing.T) {
	cases := []struct {
		zone, expr, from string
		want             []string
	}{
		// New York spring forward 2026-03-08 02:00 -> 03:00.
		{"America/New_York", "30 2 * * *", "2026-03-07T12:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"America/New_York", "0 2 * * *", "2026-03-07T12:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"America/New_York", "15 1,2 * * *", "2026-03-08T00:00:00-05:00", []string{"2026-03-08T01:15:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T01:15:00-04:00"}},
		{"America/New_York", "*/15 * * * *", "2026-03-08T01:30:00-05:00", []string{"2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:15:00-04:00"}},
		{"America/New_York", "0 * * * *", "2026-03-08T00:30:00-05:00", []string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		// New York fall back 2026-11-01 02:00 EDT -> 01:00 EST.
		{"America/New_York", "0 1 * * *", "2026-10-31T12:00:00-04:00", []string{"2026-11-01T01:00:00-04:00", "2026-11-02T01:00:00-05:00"}},
		{"America/New_York", "30 2 * * *", "2026-10-31T12:00:00-04:00", []string{"2026-11-01T02:30:00-05:00", "2026-11-02T02:30:00-05:00"}},
		{"America/New_York", "15 1,2 * * *", "2026-11-01T00:00:00-04:00", []string{"2026-11-01T01:15:00-04:00", "2026-11-01T02:15:00-05:00", "2026-11-02T01:15:00-05:00"}},
		{"America/New_York", "*/15 * * * *", "2026-11-01T01:40:00-04:00", []string{"2026-11-01T01:45:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:15:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T01:45:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"America/New_York", "0 * * * *", "2026-11-01T00:30:00-04:00", []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		// New York 2027: 2027-03-14 and 2027-11-07.
		{"America/New_York", "30 2 * * *", "2027-03-13T12:00:00-05:00", []string{"2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"}},
		{"America/New_York", "0 1 * * *", "2027-11-06T12:00:00-04:00", []string{"2027-11-07T01:00:00-04:00", "2027-11-08T01:00:00-05:00"}},
		{"America/New_York", "0 * * * *", "2027-11-07T00:30:00-04:00", []string{"2027-11-07T01:00:00-04:00", "2027-11-07T01:00:00-05:00", "2027-11-07T02:00:00-05:00"}},
		// A weekly job whose day is the change: Sunday midnight is not affected.
		{"America/New_York", "0 0 * * 0", "2027-03-10T00:00:00-05:00", []string{"2027-03-14T00:00:00-05:00", "2027-03-21T00:00:00-04:00"}},
		// London spring forward 2026-03-29 01:00 GMT -> 02:00 BST.
		{"Europe/London", "30 1 * * *", "2026-03-28T12:00:00Z", []string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
		{"Europe/London", "0 1 * * *", "2026-03-28T12:00:00Z", []string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:00:00+01:00"}},
		{"Europe/London", "0 2 * * *", "2026-03-28T12:00:00Z", []string{"2026-03-29T02:00:00+01:00", "2026-03-30T02:00:00+01:00"}},
		{"Europe/London", "15 1,2 * * *", "2026-03-29T00:00:00Z", []string{"2026-03-29T02:00:00+01:00", "2026-03-29T02:15:00+01:00", "2026-03-30T01:15:00+01:00"}},
		{"Europe/London", "*/15 * * * *", "2026-03-29T00:40:00Z", []string{"2026-03-29T00:45:00Z", "2026-03-29T02:00:00+01:00", "2026-03-29T02:15:00+01:00"}},
		// London fall back 2026-10-25 02:00 BST -> 01:00 GMT.
		{"Europe/London", "30 1 * * *", "2026-10-24T12:00:00+01:00", []string{"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"}},
		{"Europe/London", "15 1,2 * * *", "2026-10-25T00:00:00+01:00", []string{"2026-10-25T01:15:00+01:00", "2026-10-25T02:15:00Z", "2026-10-26T01:15:00Z"}},
		{"Europe/London", "0 * * * *", "2026-10-25T00:30:00+01:00", []string{"2026-10-25T01:00:00+01:00", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{"Europe/London", "0 0 * * 0", "2026-10-20T00:00:00+01:00", []string{"2026-10-25T00:00:00+01:00", "2026-11-01T00:00:00Z"}},
		// London 2027: 2027-03-28 and 2027-10-31.
		{"Europe/London", "30 1 * * *", "2027-03-27T12:00:00Z", []string{"2027-03-28T02:00:00+01:00", "2027-03-29T01:30:00+01:00"}},
		{"Europe/London", "0 1 * * *", "2027-10-30T12:00:00+01:00", []string{"2027-10-31T01:00:00+01:00", "2027-11-01T01:00:00Z"}},
		{"Europe/London", "*/15 * * * *", "2027-10-31T01:40:00+01:00", []string{"2027-10-31T01:45:00+01:00", "2027-10-31T01:00:00Z", "2027-10-31T01:15:00Z"}},
		// Lord Howe fall back 2026-04-05 02:00 +11 -> 01:30 +10:30 (01:30-02:00 repeats).
		{"Australia/Lord_Howe", "45 1 * * *", "2026-04-04T12:00:00+11:00", []string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"Australia/Lord_Howe", "0 1 * * *", "2026-04-04T12:00:00+11:00", []string{"2026-04-05T01:00:00+11:00", "2026-04-06T01:00:00+10:30"}},
		{"Australia/Lord_Howe", "15 1,2 * * *", "2026-04-05T00:00:00+11:00", []string{"2026-04-05T01:15:00+11:00", "2026-04-05T02:15:00+10:30", "2026-04-06T01:15:00+10:30"}},
		{"Australia/Lord_Howe", "*/15 * * * *", "2026-04-05T01:20:00+11:00", []string{"2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"}},
		// The hour field is not *: the repeated 01:30 and 01:45 fire once.
		{"Australia/Lord_Howe", "*/15 1 * * *", "2026-04-05T01:40:00+11:00", []string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:00:00+10:30"}},
		{"Australia/Lord_Howe", "0 * * * *", "2026-04-05T00:30:00+11:00", []string{"2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30", "2026-04-05T03:00:00+10:30"}},
		// Lord Howe spring forward 2026-10-04 02:00 +10:30 -> 02:30 +11.
		{"Australia/Lord_Howe", "0 2 * * *", "2026-10-03T12:00:00+10:30", []string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"}},
		{"Australia/Lord_Howe", "30 2 * * *", "2026-10-03T12:00:00+10:30", []string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:30:00+11:00"}},
		{"Australia/Lord_Howe", "15 1,2 * * *", "2026-10-04T00:00:00+10:30", []string{"2026-10-04T01:15:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T01:15:00+11:00"}},
		{"Australia/Lord_Howe", "*/15 * * * *", "2026-10-04T01:40:00+10:30", []string{"2026-10-04T01:45:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"}},
		{"Australia/Lord_Howe", "0 * * * *", "2026-10-04T00:30:00+10:30", []string{"2026-10-04T01:00:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T03:00:00+11:00"}},
		// Lord Howe 2027: 2027-04-04 and 2027-10-03.
		{"Australia/Lord_Howe", "45 1 * * *", "2027-04-03T12:00:00+11:00", []string{"2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"}},
		{"Australia/Lord_Howe", "15 2 * * *", "2027-10-02T12:00:00+10:30", []string{"2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00"}},
		{"Australia/Lord_Howe", "0 0 * * 0", "2027-09-30T00:00:00+10:30", []string{"2027-10-03T00:00:00+10:30", "2027-10-10T00:00:00+11:00"}},
	}
	for _, c := range cases {
		t.Run(c.zone+" "+c.expr+" "+c.from, func(t *testing.T) {
			s := mustParse(t, c.expr, c.zone)
			from, err := time.Parse(time.RFC3339, c.from)
			if err != nil {
				t.Fatal(err)
			}
			got := next(s, from, len(c.want))
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("next %d after %s:\n got %v\nwant %v", len(c.want), c.from, got, c.want)
			}
		})
	}
}

func TestElapsedTimeMode(t *testing.T) {
	for expr, want := range map[string]bool{
		"*/15 * * * *": true, "0 * * * *": true, "0 */1 * * *": true, "0 0-23 * * 1": true, "@hourly": true,
		"0 */2 * * *": false, "30 2 * * *": false, "0 0-22 * * *": false, "@daily": false,
	} {
		if got := mustParse(t, expr, "UTC").FollowsElapsedTime(); got != want {
			t.Errorf("%q: follows elapsed time %v, want %v", expr, got, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, expr := range []string{"@every 1h", "TZ=UTC 0 * * * *", "CRON_TZ=UTC 0 * * * *", "61 * * * *", "* * *", ""} {
		if _, err := Parse(expr, time.UTC); err == nil {
			t.Errorf("Parse(%q) succeeded", expr)
		}
	}
	if _, err := Parse("0 * * * *", nil); err == nil {
		t.Error("Parse with a nil location succeeded")
	}
}

func TestNeverFires(t *testing.T) {
	s := mustParse(t, "0 0 30 2 *", "UTC")
	if got := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !got.IsZero() {
		t.Fatalf("Feb 30 fired at %v", got)
	}
	leap := mustParse(t, "0 0 29 2 *", "Europe/London")
	if got := leap.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); got.Format(time.RFC3339) != "2028-02-29T00:00:00Z" {
		t.Fatalf("Feb 29 after 2026: %v", got)
	}
}

func TestTicksAndInterval(t *testing.T) {
	s := mustParse(t, "0 */6 * * *", "UTC")
	from := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	ticks, more := s.Ticks(from, from.Add(24*time.Hour), 10)
	if len(ticks) != 4 || more || !ticks[0].Equal(from.Add(6*time.Hour)) || !ticks[3].Equal(from.Add(24*time.Hour)) {
		t.Fatalf("ticks %v more %v", ticks, more)
	}
	ticks, more = s.Ticks(from, from.Add(24*time.Hour), 2)
	if len(ticks) != 2 || !more {
		t.Fatalf("limited ticks %v more %v", ticks, more)
	}
	if d := s.Interval(from); d != 6*time.Hour {
		t.Fatalf("interval %v", d)
	}
	// The interval that spans a spring-forward change is an hour shorter.
	ny := mustParse(t, "30 2 * * *", "America/New_York")
	tick := time.Date(2026, 3, 7, 2, 30, 0, 0, mustLoc(t, "America/New_York"))
	if d := ny.Interval(tick); d != 23*time.Hour+30*time.Minute {
		t.Fatalf("interval across spring forward: %v", d)
	}
}

func TestParams(t *testing.T) {
	kol := mustLoc(t, "Asia/Kolkata")
	tick := time.Date(2026, 11, 1, 0, 30, 0, 0, kol) // 2026-10-31T19:00Z
	p := Params(tick, kol)
	if p["date"] != "2026-11-01" || p["scheduled_for"] != "2026-10-31T19:00:00Z" {
		t.Fatalf("params %v", p)
	}
}
