package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// writeSpec writes a spec file of dir.
func writeSpec(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenSpecKeepsLastGood: a job whose file breaks (a reload, as on
// SIGHUP) keeps firing with its last good spec, without reading the broken
// file; its tick records the reload error; the error is logged once per
// change, not at every reload or pass. Deleting the file unschedules it.
func TestBrokenSpecKeepsLastGood(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
	dir := t.TempDir()
	good := jobSpec("allow", "").body
	writeSpec(t, dir, "recs.yaml", good)
	logs := &syncBuffer{}
	s := mkScheduler(t, led, clock, Dir{Path: dir, Now: clock.Now}, "a", time.Hour, slog.New(slog.NewTextHandler(logs, nil)))
	if errs := s.Load(); len(errs) > 0 {
		t.Fatal(errs)
	}
	s.pass(ctx)
	clock.add(30*time.Minute + 10*time.Second)
	s.pass(ctx) // 10:00 fires with the good spec

	// The file breaks; reloads (SIGHUP, the directory watch) refuse it.
	writeSpec(t, dir, "recs.yaml", "name: recs\nschedule: [\n")
	for range 3 {
		if errs := s.Load(); len(errs) != 1 {
			t.Fatalf("reload of a broken spec: %v, want one error", errs)
		}
	}
	clock.add(time.Hour)
	for range 3 {
		s.pass(ctx) // 11:00 fires with the last good spec
		clock.add(time.Second)
	}
	got := runsFor(t, led, "recs")
	if got["2026-03-01T10:00:00Z"] != 1 || got["2026-03-01T11:00:00Z"] != 1 {
		t.Fatalf("runs per tick %v; want 10:00 and 11:00 (the last good spec) once each", got)
	}
	last, err := led.LastTick(ctx, "recs")
	if err != nil {
		t.Fatal(err)
	}
	if last.Outcome != ledger.TickFired || !strings.Contains(last.Reason, "spec reload failed") || !strings.Contains(last.Reason, "recs.yaml") {
		t.Fatalf("tick fired with the last good spec: %+v; want its reason to record the reload error", last)
	}
	runs, _ := led.Runs(ctx, "recs", 1)
	if string(runs[0].Spec) != good {
		t.Fatalf("the 11:00 run's spec is\n%s\nwant the last good one", runs[0].Spec)
	}
	if n := logs.count(`msg="job spec refused`); n != 1 {
		t.Fatalf("the same reload error was logged %d times; want once\n%s", n, logs.buf.String())
	}
	if n := logs.count(`msg="schedule pass"`); n != 0 {
		t.Fatalf("schedule pass errors logged %d times while the job kept firing\n%s", n, logs.buf.String())
	}
	// Another error is a change: logged again.
	writeSpec(t, dir, "recs.yaml", "name: recs\nschedule: \"0 * * * *\"\nbogus_field: 1\n")
	s.Load()
	if n := logs.count(`msg="job spec refused`); n != 2 {
		t.Fatalf("a new reload error was logged %d times in all; want 2", n)
	}

	// The file is deleted, while another file of the directory is bad: the
	// job is unscheduled all the same.
	if err := os.Remove(filepath.Join(dir, "recs.yaml")); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, dir, "other.yaml", "name: other\nschedule: [\n")
	if errs := s.Load(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "other.yaml") {
		t.Fatalf("reload: %v, want other.yaml's error only", errs)
	}
	clock.add(time.Hour)
	s.pass(ctx)
	if got := runsFor(t, led, "recs"); len(got) != 2 {
		t.Fatalf("runs per tick %v after the file was deleted; want no new run", got)
	}
	if last, _ := led.LastTick(ctx, "recs"); !last.ScheduledFor.Equal(time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("last tick %v after the file was deleted; want 11:00", last.ScheduledFor)
	}
}

// TestFailingPassLoggedOnce: a job whose pass keeps failing (here its
// planner) is retried every pass but logged once per error, then logged
// as recovered, and fires.
func TestFailingPassLoggedOnce(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
	logs := &syncBuffer{}
	broken := true
	s := New(Options{Specs: jobSpec("allow", ""), Ledger: led, Holder: "a", Clock: clock, LeaseTTL: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Cancel: func(context.Context, jobs.Run) error { return nil },
		Plan: func(ctx context.Context, spec *jobs.Spec) (jobs.Run, []jobs.Shard, error) {
			if broken {
				return jobs.Run{}, nil, errors.New("source unreachable")
			}
			return plan(ctx, spec)
		}})
	if errs := s.Load(); len(errs) > 0 {
		t.Fatal(errs)
	}
	s.pass(ctx)
	clock.add(30*time.Minute + 10*time.Second)
	for range 5 {
		s.pass(ctx)
		clock.add(time.Second)
	}
	if n := logs.count(`msg="schedule pass"`); n != 1 {
		t.Fatalf("a failing pass was logged %d times over 5 passes; want once\n%s", n, logs.buf.String())
	}
	broken = false
	s.pass(ctx)
	if n := logs.count(`msg="schedule pass recovered"`); n != 1 {
		t.Fatalf("recovery logged %d times; want once", n)
	}
	if got := runsFor(t, led, "recs"); got["2026-03-01T10:00:00Z"] != 1 {
		t.Fatalf("runs per tick %v; want 10:00 once", got)
	}
}
