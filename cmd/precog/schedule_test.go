package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// TestScheduleNext drives `precog schedule next` through the binary across
// New York's spring-forward change and Lord Howe's 30-minute fall back.
func TestScheduleNext(t *testing.T) {
	dir := workdir(t)
	ny := writeSpec(t, dir, "ny.yaml", rankerSpec+"schedule: \"30 2 * * *\"\ntimezone: America/New_York\n")
	r := precog(t, dir, "schedule", "next", ny, "--from", "2026-03-06T12:00:00Z", "-n", "4")
	want := "2026-03-07T02:30:00-05:00\n2026-03-08T03:00:00-04:00\n2026-03-09T02:30:00-04:00\n2026-03-10T02:30:00-04:00\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	lh := writeSpec(t, dir, "lh.yaml", rankerSpec+"schedule: \"*/15 * * * *\"\ntimezone: Australia/Lord_Howe\n")
	r = precog(t, dir, "schedule", "next", lh, "--from", "2026-04-05T01:40:00+11:00", "-n", "3")
	want = "2026-04-05T01:45:00+11:00\n2026-04-05T01:30:00+10:30\n2026-04-05T01:45:00+10:30\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("lord howe: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	// Without --from: the next fire time after now, in the job's zone.
	r = precog(t, dir, "schedule", "next", ny, "-n", "1")
	got, err := time.Parse(time.RFC3339, strings.TrimSpace(r.stdout))
	if r.code != 0 || err != nil || !got.After(time.Now()) || time.Until(got) > 25*time.Hour {
		t.Fatalf("default --from: exit %d %q %v", r.code, r.stdout, err)
	}
}

func TestScheduleNextInvalid(t *testing.T) {
	dir := workdir(t)
	plain := writeSpec(t, dir, "plain.yaml", rankerSpec)
	ny := writeSpec(t, dir, "ny.yaml", rankerSpec+"schedule: \"30 2 * * *\"\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{plain}, "schedule: the job has no schedule"},
		{[]string{ny, "--from", "tomorrow"}, `--from "tomorrow": not an RFC 3339 time`},
		{[]string{ny, "-n", "0"}, "-n: must be between 1 and"},
		{nil, "accepts 1 arg(s), received 0"},
	} {
		r := precog(t, dir, append([]string{"schedule", "next"}, c.args...)...)
		if r.code != exitInvalid || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

func TestScheduleList(t *testing.T) {
	dir := workdir(t)
	writeSpec(t, dir, "jobs/a.yaml", rankerSpec+"schedule: \"0 6 * * *\"\ntimezone: Europe/London\ncatchup: all\nmax_catchup: 3\nmax_staleness: 30h\n")
	writeSpec(t, dir, "jobs/b.yaml", strings.Replace(rankerSpec, "name: scores", "name: manual", 1))
	r := precog(t, dir, "schedule", "list", "--jobs", "jobs")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "JOB") {
		t.Fatalf("want a header and one scheduled job:\n%s", r.stdout)
	}
	f := strings.Fields(lines[1])
	if len(f) < 7 || f[0] != "scores" || f[6] != "Europe/London" || !strings.Contains(lines[1], "all (max 3)") || !strings.Contains(lines[1], "30h0m0s") {
		t.Fatalf("row: %q", lines[1])
	}
	if _, err := time.Parse(time.RFC3339, f[7]); err != nil || !strings.Contains(f[7], "T06:00:00") {
		t.Fatalf("next fire %q: %v", f[7], err)
	}
}

// TestScheduleListLastRun: the ledger hook's answer fills LAST_RUN and STALE.
func TestScheduleListLastRun(t *testing.T) {
	now := time.Date(2026, 6, 2, 12, 0, 0, 0, time.UTC)
	mk := func(name string, staleness time.Duration) *jobs.Spec {
		return &jobs.Spec{Name: name, Schedule: "0 6 * * *", Timezone: "UTC", Catchup: jobs.CatchupLatest, MaxCatchup: 10,
			Concurrency: "forbid", MaxStaleness: jobs.Duration{Duration: staleness}}
	}
	runs := map[string]lastRun{
		"fresh": {ID: "r1", State: "succeeded", ScheduledFor: now.Add(-6 * time.Hour), PublishedAt: now.Add(-5 * time.Hour)},
		"stale": {ID: "r2", State: "succeeded", ScheduledFor: now.Add(-30 * time.Hour), PublishedAt: now.Add(-29 * time.Hour)},
		"unpub": {ID: "r3", State: "running", ScheduledFor: now.Add(-6 * time.Hour)},
	}
	lookup := func(_ context.Context, job string) (lastRun, bool, error) {
		r, ok := runs[job]
		return r, ok, nil
	}
	var b bytes.Buffer
	specs := []*jobs.Spec{mk("fresh", 24*time.Hour), mk("stale", 24*time.Hour), mk("unpub", 24*time.Hour), mk("never", 0)}
	if err := writeScheduleList(context.Background(), &b, specs, now, lookup); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"2026-06-02T06:00:00Z succeeded  fresh", "2026-06-01T06:00:00Z succeeded  stale (29h0m0s old)", "running    unpublished", "never  0 6 * * *  UTC       2026-06-03T06:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
}
