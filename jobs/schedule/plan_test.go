package schedule

import (
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

func hours(t0 time.Time, hs ...int) []time.Time {
	var out []time.Time
	for _, h := range hs {
		out = append(out, t0.Add(time.Duration(h)*time.Hour))
	}
	return out
}

func sameTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestPlan drives Plan with a fake clock: an hourly job whose scheduler was
// down from t0 (its last handled tick) until now.
func TestPlan(t *testing.T) {
	s := mustParse(t, "0 * * * *", "UTC")
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name         string
		now          time.Time
		policy       Policy
		fire, missed []time.Time
	}{
		{"on time, latest", t0.Add(time.Hour + 5*time.Second), Policy{Catchup: jobs.CatchupLatest, MaxCatchup: 10}, hours(t0, 1), nil},
		{"on time, none", t0.Add(time.Hour + 5*time.Second), Policy{Catchup: jobs.CatchupNone, MaxCatchup: 10}, hours(t0, 1), nil},
		{"nothing due", t0.Add(59 * time.Minute), Policy{Catchup: jobs.CatchupAll, MaxCatchup: 10}, nil, nil},
		// Down 5.5 hours: with the default deadline (one interval) only the
		// newest tick is within it.
		{"latest after downtime", t0.Add(5*time.Hour + 30*time.Minute), Policy{Catchup: jobs.CatchupLatest, MaxCatchup: 10}, hours(t0, 5), hours(t0, 1, 2, 3, 4)},
		{"all, default deadline", t0.Add(5*time.Hour + 30*time.Minute), Policy{Catchup: jobs.CatchupAll, MaxCatchup: 10}, hours(t0, 5), hours(t0, 1, 2, 3, 4)},
		{"none after downtime", t0.Add(5*time.Hour + 30*time.Minute), Policy{Catchup: jobs.CatchupNone, MaxCatchup: 10}, nil, hours(t0, 1, 2, 3, 4, 5)},
		{"all within a 3h deadline", t0.Add(5*time.Hour + 30*time.Minute), Policy{Catchup: jobs.CatchupAll, MaxCatchup: 10, StartingDeadline: 3 * time.Hour}, hours(t0, 3, 4, 5), hours(t0, 1, 2)},
		{"all bounded by max_catchup", t0.Add(5*time.Hour + 30*time.Minute), Policy{Catchup: jobs.CatchupAll, MaxCatchup: 2, StartingDeadline: 24 * time.Hour}, hours(t0, 4, 5), hours(t0, 1, 2, 3)},
		{"latest with a long deadline", t0.Add(5*time.Hour + 30*time.Minute), Policy{Catchup: jobs.CatchupLatest, MaxCatchup: 10, StartingDeadline: 24 * time.Hour}, hours(t0, 5), hours(t0, 1, 2, 3, 4)},
		// The newest tick is past a 10-minute deadline: missed, whatever the policy.
		{"latest past its deadline", t0.Add(time.Hour + 20*time.Minute), Policy{Catchup: jobs.CatchupLatest, MaxCatchup: 10, StartingDeadline: 10 * time.Minute}, nil, hours(t0, 1)},
		{"all past its deadline", t0.Add(time.Hour + 20*time.Minute), Policy{Catchup: jobs.CatchupAll, MaxCatchup: 10, StartingDeadline: 10 * time.Minute}, nil, hours(t0, 1)},
		// none: seen 2 minutes late is beyond LiveTolerance.
		{"none, seen late", t0.Add(time.Hour + 2*time.Minute), Policy{Catchup: jobs.CatchupNone, MaxCatchup: 10}, nil, hours(t0, 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := s.Plan(t0, c.now, c.policy)
			if err != nil {
				t.Fatal(err)
			}
			if !sameTimes(d.Fire, c.fire) || !sameTimes(d.Missed, c.missed) || d.MissedTruncated {
				t.Fatalf("fire %v missed %v (truncated %v)\nwant fire %v missed %v", d.Fire, d.Missed, d.MissedTruncated, c.fire, c.missed)
			}
			wantLast := t0
			if all := append(append([]time.Time{}, c.fire...), c.missed...); len(all) > 0 {
				wantLast = hours(t0, int(c.now.Sub(t0)/time.Hour))[0]
			}
			if !d.Last.Equal(wantLast) {
				t.Fatalf("last %v, want %v", d.Last, wantLast)
			}
		})
	}
}

func TestPlanNoHistory(t *testing.T) {
	s := mustParse(t, "0 * * * *", "UTC")
	now := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	d, err := s.Plan(time.Time{}, now, Policy{Catchup: jobs.CatchupAll, MaxCatchup: 10})
	if err != nil || len(d.Fire) != 0 || len(d.Missed) != 0 || !d.Last.Equal(now) {
		t.Fatalf("no history: %+v %v", d, err)
	}
}

// TestPlanLongPause: a minutely job paused for two years lists at most
// MaxMissedListed missed ticks, still fires the newest, and is fast.
func TestPlanLongPause(t *testing.T) {
	s := mustParse(t, "* * * * *", "Europe/London")
	last := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC)
	for _, p := range []Policy{{Catchup: jobs.CatchupLatest, MaxCatchup: 1}, {Catchup: jobs.CatchupAll, MaxCatchup: 3, StartingDeadline: 10 * time.Minute}} {
		start := time.Now()
		d, err := s.Plan(last, now, p)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%+v: plan took %v", p, took)
		}
		newest := now.Truncate(time.Minute)
		if len(d.Fire) == 0 || !d.Fire[len(d.Fire)-1].Equal(newest) || !d.Last.Equal(newest) {
			t.Fatalf("%+v: fire %v last %v, want newest %v", p, d.Fire, d.Last, newest)
		}
		if p.Catchup == jobs.CatchupAll && len(d.Fire) != 3 {
			t.Fatalf("all: fired %d, want 3", len(d.Fire))
		}
		if !d.MissedTruncated || len(d.Missed) > MaxMissedListed+10 || !d.Missed[0].Equal(last.Add(time.Minute)) {
			t.Fatalf("%+v: %d missed listed, truncated %v, first %v", p, len(d.Missed), d.MissedTruncated, d.Missed[0])
		}
	}
}

func TestPlanRefusesBadPolicy(t *testing.T) {
	s := mustParse(t, "0 * * * *", "UTC")
	now := time.Now()
	for _, p := range []Policy{{Catchup: "some", MaxCatchup: 1}, {Catchup: jobs.CatchupAll}, {Catchup: jobs.CatchupAll, MaxCatchup: 1, StartingDeadline: -time.Second}} {
		if _, err := s.Plan(now.Add(-time.Hour), now, p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestPolicyOf(t *testing.T) {
	spec := &jobs.Spec{Catchup: jobs.CatchupAll, MaxCatchup: 4, StartingDeadline: jobs.Duration{Duration: time.Hour}}
	if p := PolicyOf(spec); p != (Policy{Catchup: "all", MaxCatchup: 4, StartingDeadline: time.Hour}) {
		t.Fatalf("%+v", p)
	}
}
