package scheduler

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// files is a SpecSource whose files the test adds, changes and removes.
type files struct {
	mu     sync.Mutex
	bodies map[string]string // file → YAML
}

func (f *files) set(file, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bodies == nil {
		f.bodies = map[string]string{}
	}
	f.bodies[file] = body
}

func (f *files) Read() ([]SpecFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []SpecFile
	for _, file := range slices.Sorted(maps.Keys(f.bodies)) {
		sp, err := jobs.Parse([]byte(f.bodies[file]), file, map[string]string{"date": "2026-01-01", "scheduled_for": "2026-01-01T00:00:00Z"}, nil)
		out = append(out, SpecFile{File: file, Spec: sp, Err: err})
	}
	return out, nil
}

func (f *files) Render(sp *jobs.Spec, params map[string]string) (*jobs.Spec, error) {
	return jobs.Parse(sp.Raw, sp.File, params, nil)
}

// minutely is a job firing every minute, named name.
func minutely(name string) string {
	body := strings.Replace(jobSpec("allow", "").body, "name: recs", "name: "+name, 1)
	return strings.Replace(body, `"0 * * * *"`, `"* * * * *"`, 1)
}

// runsFor counts the job's runs per scheduled_for param.
func runsFor(t *testing.T, led Ledger, job string) map[string]int {
	t.Helper()
	runs, err := led.Runs(context.Background(), job, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range runs {
		out[r.Params["scheduled_for"]]++
	}
	return out
}

func mkScheduler(t *testing.T, led Ledger, clock Clock, src SpecSource, holder string, ttl time.Duration, log *slog.Logger) *Scheduler {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return New(Options{Specs: src, Ledger: led, Plan: plan, Holder: holder, Clock: clock, LeaseTTL: ttl, Logger: log,
		Cancel: func(context.Context, jobs.Run) error { return nil }})
}

// TestNewJobFirstTickSurvivesFailover: a minutely job is added while the
// leader's ledger connection is paused (the reproduction); the
// standby takes over 4 s after the job's first tick. That tick fires, once:
// the standby recorded when it first saw the job, and starts from that,
// not from its own start as leader.
func TestNewJobFirstTickSurvivesFailover(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 59, 0, 0, time.UTC)}
	src := &files{}
	cutA := &partitioned{Ledger: led}
	a := mkScheduler(t, cutA, clock, src, "a", 600*time.Millisecond, nil)
	b := mkScheduler(t, led, clock, src, "b", 600*time.Millisecond, nil)
	a.Load()
	b.Load()
	a.pass(ctx)
	b.pass(ctx)
	if !a.Leader() || b.Leader() {
		t.Fatal("a should lead alone")
	}
	// The leader's ledger connection pauses; the job is added.
	cutA.mu.Lock()
	cutA.cut = true
	cutA.mu.Unlock()
	src.set("new.yaml", minutely("new"))
	clock.add(40 * time.Second) // 09:59:40
	for _, s := range []*Scheduler{a, b} {
		if errs := s.Load(); len(errs) > 0 {
			t.Fatal(errs)
		}
		s.pass(ctx)
	}
	clock.add(24 * time.Second) // 10:00:04: the standby takes over once a's lease lapses
	deadline := time.Now().Add(10 * time.Second)
	for !b.Leader() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		b.pass(ctx)
		a.pass(ctx) // still cut: must not fire
	}
	if !b.Leader() {
		t.Fatal("b did not take over")
	}
	// a comes back; both pass over the tick again.
	cutA.mu.Lock()
	cutA.cut = false
	cutA.mu.Unlock()
	a.pass(ctx)
	b.pass(ctx)
	got := runsFor(t, led, "new")
	if got["2026-03-01T10:00:00Z"] != 1 || len(got) != 1 {
		t.Fatalf("runs per tick %v; want the job's first tick 10:00 exactly once", got)
	}
}

// TestNewJobFirstTickSurvivesRestart: the scheduler that saw a new job
// stops before the job's first tick; the one started after that tick
// fires it (from the ledger's first-seen time), once.
func TestNewJobFirstTickSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 59, 30, 0, time.UTC)}
	src := &files{}
	src.set("new.yaml", minutely("new"))
	first := mkScheduler(t, led, clock, src, "first", time.Hour, nil)
	if errs := first.Load(); len(errs) > 0 {
		t.Fatal(errs)
	}
	first.pass(ctx)
	if err := led.Resign(ctx, leaseName, "first"); err != nil {
		t.Fatal(err)
	}
	clock.add(50 * time.Second) // 10:00:20: restarted after the tick
	second := mkScheduler(t, led, clock, src, "second", time.Hour, nil)
	if errs := second.Load(); len(errs) > 0 {
		t.Fatal(errs)
	}
	second.pass(ctx)
	second.pass(ctx)
	if got := runsFor(t, led, "new"); got["2026-03-01T10:00:00Z"] != 1 || len(got) != 1 {
		t.Fatalf("runs per tick %v; want the job's first tick 10:00 exactly once", got)
	}
}

// syncBuffer is a log sink tests read while the scheduler writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count is how many log lines contain s.
func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}
