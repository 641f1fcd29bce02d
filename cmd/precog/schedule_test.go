package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/dashboard"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/jobs/scheduler"
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

// TestScheduleListLastRun: on both ledgers, LAST_RUN is the newest
// scheduled run and STALE is scheduler.StalenessOf's answer, the same
// words as the dashboard's jobs page (served here over the ledger behind
// openedLedger, as precog dashboard does): a job whose newest scheduled run
// failed after three successes is stale by its last success's age, not
// "unpublished".
func TestScheduleListLastRun(t *testing.T) {
	ctx := context.Background()
	open := map[string]func(t *testing.T) ledger.Store{
		"bolt": func(t *testing.T) ledger.Store {
			l, err := bolt.OpenIn(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		"postgres": func(t *testing.T) ledger.Store {
			l, err := postgres.Open(ctx, testservers.Postgres(t).DSN, postgres.Options{PollOnly: true, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
	}
	for name, openLed := range open {
		t.Run(name, func(t *testing.T) {
			l := openLed(t)
			mk := func(job string, bound time.Duration) *jobs.Spec {
				return &jobs.Spec{Name: job, Schedule: "0 6 * * *", Timezone: "UTC", Catchup: jobs.CatchupLatest, MaxCatchup: 10,
					Concurrency: "forbid", MaxStaleness: jobs.Duration{Duration: bound}}
			}
			var seq int
			run := func(job string, st jobs.RunState) jobs.Run {
				seq++
				params := map[string]string{"scheduled_for": time.Date(2026, 6, seq, 6, 0, 0, 0, time.UTC).Format(time.RFC3339)}
				r := jobs.Run{ID: fmt.Sprintf("%s-%d-%d", job, seq, time.Now().UnixNano()), Job: job, Version: fmt.Sprint("v", seq),
					Params: params, ParamsKey: jobs.ParamsKey(params), SpecHash: "h", ModelVersion: "m"}
				if err := l.CreateRun(ctx, r, []jobs.Shard{{RunID: r.ID, Plan: []byte("{}")}}); err != nil {
					t.Fatal(err)
				}
				if err := l.SetRunState(ctx, r.ID, st, ""); err != nil {
					t.Fatal(err)
				}
				r, err := l.Run(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			var lastOK jobs.Run
			for range 3 {
				lastOK = run("daily", jobs.RunSucceeded)
				run("loose", jobs.RunSucceeded)
			}
			run("daily", jobs.RunFailed) // the newest scheduled run
			now := lastOK.UpdatedAt.Add(30 * time.Hour)
			specs := []*jobs.Spec{mk("daily", 24*time.Hour), mk("loose", 0), mk("never", time.Hour)}
			var b bytes.Buffer
			if err := scheduler.WriteList(ctx, &b, scheduler.ListParams{Specs: specs, Now: now, Runs: l}); err != nil {
				t.Fatal(err)
			}
			list := b.String()
			flat := regexp.MustCompile(` +`).ReplaceAllString(list, " ")
			for _, want := range []string{"2026-06-07T06:00:00Z failed stale: 30h0m0s old", "never 0 6 * * * UTC", "- stale: never succeeded"} {
				if !strings.Contains(flat, want) {
					t.Errorf("schedule list lacks %q:\n%s", want, list)
				}
			}

			dir := t.TempDir()
			for _, spec := range []string{"daily", "loose", "never"} {
				bound := map[string]string{"daily": "max_staleness: 24h\n", "never": "max_staleness: 1h\n"}[spec]
				writeSpec(t, dir, spec+".yaml", strings.Replace(rankerSpec, "name: scores", "name: "+spec, 1)+"schedule: \"0 6 * * *\"\n"+bound)
			}
			srv, err := dashboard.New(dashboard.Options{Source: dashboard.Shared{L: &openedLedger{Store: l, where: name}, Name: name},
				InsecureNoAuth: true, JobsDir: dir, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest("GET", "/jobs", nil))
			if rec.Code != 200 {
				t.Fatalf("/jobs = %d\n%s", rec.Code, rec.Body)
			}
			page := rec.Body.String()
			for job, want := range map[string]string{"daily": "stale: 30h0m0s old", "loose": "old", "never": "stale: never succeeded"} {
				row := regexp.MustCompile(`(?s)<tr data-job="` + job + `">.*?</tr>`).FindString(page)
				var listed string
				for _, line := range strings.Split(list, "\n") {
					if strings.HasPrefix(line, job+" ") {
						listed = line
					}
				}
				if !strings.Contains(row, want) || !strings.HasSuffix(strings.TrimSpace(listed), stalenessCell(t, row)) {
					t.Errorf("job %s: schedule list %q and the dashboard's row disagree (want %q):\n%s", job, listed, want, row)
				}
			}
		})
	}
}

// stalenessCell is the staleness words of a jobs-page row ("… (max)").
func stalenessCell(t *testing.T, row string) string {
	t.Helper()
	m := regexp.MustCompile(`<td>(?:<span class="state st-failed">)?([^<(]+?)(?:</span>)? \([^)]*\)</td>`).FindStringSubmatch(row)
	if m == nil {
		t.Fatalf("no staleness cell in %s", row)
	}
	return m[1]
}
