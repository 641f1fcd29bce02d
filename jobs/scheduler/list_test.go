package scheduler

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// viewSpec is a spec that loads for a view: its sink's secret is never
// expanded, its model never opened.
const viewSpec = "name: %s\nsource:\n  parquet: { path: \"data/date={{.date}}\" }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { s: s }\nsinks:\n  postgres: { dsn: \"${NEVER_SET_DSN}\", table: t }\n"

func writeSpecs(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadScheduled: a scheduled spec loads with a tick's params and its
// schedule in its zone; one without a schedule is an error naming the
// field and how to add one.
func TestLoadScheduled(t *testing.T) {
	dir := writeSpecs(t, map[string]string{
		"ny.yaml":    strings.ReplaceAll(viewSpec, "%s", "ny") + "schedule: \"30 2 * * *\"\ntimezone: America/New_York\n",
		"plain.yaml": strings.ReplaceAll(viewSpec, "%s", "plain"),
	})
	sched, spec, err := LoadScheduled(filepath.Join(dir, "ny.yaml"), time.Now())
	if err != nil || spec.Name != "ny" || sched.Location().String() != "America/New_York" {
		t.Fatalf("LoadScheduled(ny) = %v, %v", spec, err)
	}
	from := time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)
	if got := sched.Next(from).Format(time.RFC3339); got != "2026-03-07T02:30:00-05:00" {
		t.Errorf("next = %s", got)
	}
	_, _, err = LoadScheduled(filepath.Join(dir, "plain.yaml"), time.Now())
	if err == nil || !strings.Contains(err.Error(), "plain.yaml: schedule: the job has no schedule; add a 5-field cron expression") {
		t.Errorf("no schedule: %v", err)
	}
}

// TestScheduled: the specs with a schedule, in name order; a spec that
// does not load is the error.
func TestScheduled(t *testing.T) {
	dir := writeSpecs(t, map[string]string{
		"b.yaml": strings.ReplaceAll(viewSpec, "%s", "b") + "schedule: \"0 4 * * *\"\n",
		"a.yaml": strings.ReplaceAll(viewSpec, "%s", "a") + "schedule: \"0 5 * * *\"\n",
		"m.yaml": strings.ReplaceAll(viewSpec, "%s", "manual"),
	})
	specs, err := Dir{Path: dir}.Scheduled(time.Now())
	if err != nil || len(specs) != 2 || specs[0].Name != "a" || specs[1].Name != "b" {
		t.Fatalf("Scheduled = %d specs, %v; want a then b", len(specs), err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("name: [not a spec"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (Dir{Path: dir}).Scheduled(time.Now()); err == nil || !strings.Contains(err.Error(), "c.yaml") {
		t.Errorf("a bad spec: %v, want an error naming c.yaml", err)
	}
}

// TestWriteList: each job's line has its next fire in its zone, its
// policies, the newest scheduled run and StalenessOf's words; without a
// ledger the last two columns print "-".
func TestWriteList(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	var lastOK jobs.Run
	for i, st := range []jobs.RunState{jobs.RunSucceeded, jobs.RunFailed} {
		params := map[string]string{"scheduled_for": time.Date(2026, 6, i+1, 6, 0, 0, 0, time.UTC).Format(time.RFC3339)}
		r := jobs.Run{ID: "daily-" + string(rune('a'+i)), Job: "daily", Version: "v" + string(rune('a'+i)), Params: params, ParamsKey: jobs.ParamsKey(params)}
		if err := led.CreateRun(ctx, r, []jobs.Shard{{RunID: r.ID, Plan: []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
		if err := led.SetRunState(ctx, r.ID, st, ""); err != nil {
			t.Fatal(err)
		}
		if st == jobs.RunSucceeded {
			if lastOK, err = led.Run(ctx, r.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := lastOK.UpdatedAt.Add(30 * time.Hour)
	specs := []*jobs.Spec{
		{Name: "daily", Schedule: "0 6 * * *", Timezone: "Europe/London", Catchup: jobs.CatchupAll, MaxCatchup: 3,
			Concurrency: "forbid", MaxStaleness: jobs.Duration{Duration: 24 * time.Hour}},
		{Name: "never", Schedule: "0 6 * * *", Timezone: "UTC", Catchup: jobs.CatchupLatest, Concurrency: "allow"},
	}
	flat := func(runs RunLister) string {
		var b bytes.Buffer
		if err := WriteList(ctx, &b, ListParams{Specs: specs, Now: now, Runs: runs}); err != nil {
			t.Fatal(err)
		}
		return regexp.MustCompile(` +`).ReplaceAllString(b.String(), " ")
	}
	next := time.Date(now.Year(), now.Month(), now.Day(), 6, 0, 0, 0, mustZone(t, "Europe/London"))
	if !next.After(now) {
		next = next.AddDate(0, 0, 1)
	}
	got := flat(led)
	for _, want := range []string{
		"JOB SCHEDULE TIMEZONE NEXT CATCHUP CONCURRENCY MAX_STALENESS LAST_RUN STALE\n",
		"daily 0 6 * * * Europe/London " + next.Format(time.RFC3339) + " all (max 3) forbid 24h0m0s 2026-06-02T07:00:00+01:00 failed stale: 30h0m0s old\n",
		"never 0 6 * * * UTC ", " latest allow - - never succeeded\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("list lacks %q:\n%s", want, got)
		}
	}
	if got := flat(nil); !strings.Contains(got, "forbid 24h0m0s - -\n") {
		t.Errorf("without a ledger, want LAST_RUN and STALE as -:\n%s", got)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
