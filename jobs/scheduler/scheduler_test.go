package scheduler

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// specs is a SpecSource of one job parsed from YAML.
type specs struct{ body string }

func (s specs) Read() ([]SpecFile, error) {
	sp, err := jobs.Parse([]byte(s.body), "", map[string]string{"date": "2026-01-01", "scheduled_for": "2026-01-01T00:00:00Z"}, nil)
	return []SpecFile{{File: "job.yaml", Spec: sp, Err: err}}, nil
}

func (s specs) Render(sp *jobs.Spec, params map[string]string) (*jobs.Spec, error) {
	return jobs.Parse(sp.Raw, sp.File, params, nil)
}

func jobSpec(concurrency, extra string) specs {
	return specs{body: `name: recs
schedule: "0 * * * *"
timezone: Europe/Paris
concurrency: ` + concurrency + `
source:
  parquet: { path: "data/dt={{.date}}" }
  key: id
model:
  path: m.onnx
  inputs: { x: { columns: [a] } }
  outputs: { y: y }
sinks:
  parquet: { path: "out/{{.date}}-{{.scheduled_for}}" }
` + extra}
}

// plan makes a one-shard run without reading any data.
func plan(_ context.Context, spec *jobs.Spec) (jobs.Run, []jobs.Shard, error) {
	run, shards := runner.NewRun(spec, runner.NewRunOptions{ModelVersion: "m1", Plans: []sources.ShardPlan{{Plan: []byte(`{}`), Rows: 1}}})
	return run, shards, nil
}

func newLedger(t *testing.T) *pgledger.Ledger {
	t.Helper()
	l, err := pgledger.Open(context.Background(), testservers.Postgres(t).DSN, pgledger.Options{PollOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func newScheduler(t *testing.T, led Ledger, clock Clock, src SpecSource, holder string, cancel Canceller) *Scheduler {
	t.Helper()
	if cancel == nil {
		cancel = func(ctx context.Context, r jobs.Run) error {
			return led.SetRunState(ctx, r.ID, jobs.RunCancelled, "replaced")
		}
	}
	s := New(Options{Specs: src, Ledger: led, Plan: plan, Cancel: cancel, Holder: holder, Clock: clock,
		LeaseTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if errs := s.Load(); len(errs) > 0 {
		t.Fatal(errs)
	}
	return s
}

// TestExactlyOncePerTickInSplitBrain: two replicas that both believe they
// lead, passing over the same ticks, create one run per tick.
func TestExactlyOncePerTickInSplitBrain(t *testing.T) {
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
	a := newScheduler(t, led, clock, jobSpec("allow", ""), "a", nil)
	b := newScheduler(t, led, clock, jobSpec("allow", ""), "b", nil)
	ctx := context.Background()
	for _, s := range []*Scheduler{a, b} {
		s.mu.Lock()
		s.jobs["recs"].since = clock.Now()
		s.mu.Unlock()
	}
	for range 5 {
		clock.add(time.Hour)
		var wg sync.WaitGroup
		for _, s := range []*Scheduler{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.mu.Lock()
				j := s.jobs["recs"]
				s.mu.Unlock()
				if err := s.fireDue(ctx, j); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	runs, _ := led.Runs(ctx, "recs", 0)
	if len(runs) != 5 {
		t.Fatalf("%d runs for 5 ticks", len(runs))
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.Params["scheduled_for"]] {
			t.Fatalf("two runs for tick %s", r.Params["scheduled_for"])
		}
		seen[r.Params["scheduled_for"]] = true
		if r.Params["date"] != "2026-03-01" {
			t.Errorf("run %s has date %q, want the tick's date in Europe/Paris", r.ID, r.Params["date"])
		}
	}
}

// TestOverlapPolicies: forbid skips (and records why) while the previous
// run is open; replace cancels it; allow runs both.
func TestOverlapPolicies(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		policy             string
		wantRuns, wantOpen int
	}{{"forbid", 1, 1}, {"replace", 2, 1}, {"allow", 2, 2}} {
		t.Run(tc.policy, func(t *testing.T) {
			led := newLedger(t)
			clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
			s := newScheduler(t, led, clock, jobSpec(tc.policy, ""), "a", nil)
			s.pass(ctx) // leads; the job starts now
			clock.add(time.Hour)
			s.pass(ctx) // 10:00 fires
			clock.add(time.Hour)
			s.pass(ctx) // 11:00 meets the 10:00 run still open
			runs, _ := led.Runs(ctx, "recs", 0)
			open := 0
			for _, r := range runs {
				if !r.State.Terminal() {
					open++
				}
			}
			if len(runs) != tc.wantRuns || open != tc.wantOpen {
				t.Fatalf("%s: %d runs, %d open; want %d and %d", tc.policy, len(runs), open, tc.wantRuns, tc.wantOpen)
			}
			last, err := led.LastTick(ctx, "recs")
			if err != nil {
				t.Fatal(err)
			}
			if tc.policy == "forbid" && (last.Outcome != ledger.TickSkipped || last.Reason == "") {
				t.Fatalf("forbid: last tick %+v, want skipped with a reason", last)
			}
		})
	}
}

// TestCatchupAfterDowntime: with catchup latest, a scheduler down for five
// ticks fires the newest one (within its starting deadline) and records the
// others as missed.
func TestCatchupAfterDowntime(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
	s := newScheduler(t, led, clock, jobSpec("allow", "starting_deadline: 2h\n"), "a", nil)
	s.pass(ctx)
	clock.add(time.Hour)
	s.pass(ctx) // 10:00 fired
	clock.add(5*time.Hour + 10*time.Minute)
	s.pass(ctx) // 11:00..15:00 due; 15:00 fires, 14:00 within deadline but latest fires one
	runs, _ := led.Runs(ctx, "recs", 0)
	if len(runs) != 2 || runs[0].Params["scheduled_for"] != "2026-03-01T15:00:00Z" {
		t.Fatalf("after downtime: %d runs, newest for %q; want 2, newest 15:00", len(runs), runs[0].Params["scheduled_for"])
	}
	last, _ := led.LastTick(ctx, "recs")
	if !last.ScheduledFor.Equal(time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC)) {
		t.Fatalf("last tick %v", last.ScheduledFor)
	}
}

// TestLeaderFailover: only the leader fires; when it stops renewing,
// another replica takes over within the lease TTL and catches up from the
// ledger's last tick, so no tick is lost or doubled.
func TestLeaderFailover(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
	mk := func(holder string) *Scheduler {
		s := New(Options{Specs: jobSpec("allow", "starting_deadline: 3h\ncatchup: all\nmax_catchup: 5\n"), Ledger: led, Plan: plan,
			Cancel: func(context.Context, jobs.Run) error { return nil }, Holder: holder, Clock: clock,
			LeaseTTL: 600 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if errs := s.Load(); len(errs) > 0 {
			t.Fatal(errs)
		}
		return s
	}
	a, b := mk("a"), mk("b")
	a.pass(ctx)
	b.pass(ctx)
	if !a.Leader() || b.Leader() {
		t.Fatalf("leaders: a %v, b %v; want a only", a.Leader(), b.Leader())
	}
	clock.add(time.Hour)
	a.pass(ctx) // 10:00
	b.pass(ctx)
	// a dies; b takes over once a's lease lapses (real time: the ledger's clock).
	clock.add(2 * time.Hour) // 11:00 and 12:00 due
	deadline := time.Now().Add(5 * time.Second)
	for !b.Leader() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		b.pass(ctx)
	}
	if !b.Leader() {
		t.Fatal("b did not take over")
	}
	runs, _ := led.Runs(ctx, "recs", 0)
	got := map[string]bool{}
	for _, r := range runs {
		if got[r.Params["scheduled_for"]] {
			t.Fatalf("tick %s fired twice", r.Params["scheduled_for"])
		}
		got[r.Params["scheduled_for"]] = true
	}
	for _, want := range []string{"2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", "2026-03-01T12:00:00Z"} {
		if !got[want] {
			t.Errorf("tick %s was lost in the failover (runs: %v)", want, got)
		}
	}
}

// partitioned is a ledger whose leader renewals fail while cut is set: a
// leader cut off from Postgres.
type partitioned struct {
	Ledger
	mu  sync.Mutex
	cut bool
}

func (p *partitioned) Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return false, context.DeadlineExceeded
	}
	return p.Ledger.Lead(ctx, name, holder, ttl)
}

func (p *partitioned) FirstSeen(ctx context.Context, job string, at time.Time) (time.Time, error) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return time.Time{}, context.DeadlineExceeded
	}
	return p.Ledger.FirstSeen(ctx, job, at)
}

func (p *partitioned) RecordTick(ctx context.Context, t ledger.Tick, run *jobs.Run, shards []jobs.Shard) error {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return context.DeadlineExceeded
	}
	return p.Ledger.RecordTick(ctx, t, run, shards)
}

// TestPartitionedLeaderStopsFiring: three replicas; the leader is cut off
// from the ledger (its renewals fail). It stops firing within half its
// lease, one of the others takes over once the lease lapses, and every
// tick fires exactly once.
func TestPartitionedLeaderStopsFiring(t *testing.T) {
	ctx := context.Background()
	led := newLedger(t)
	clock := &fakeClock{now: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)}
	cutA := &partitioned{Ledger: led}
	mk := func(holder string, l Ledger) *Scheduler {
		s := New(Options{Specs: jobSpec("allow", ""), Ledger: l, Plan: plan,
			Cancel: func(context.Context, jobs.Run) error { return nil }, Holder: holder, Clock: clock,
			LeaseTTL: 900 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if errs := s.Load(); len(errs) > 0 {
			t.Fatal(errs)
		}
		return s
	}
	a, b, c := mk("a", cutA), mk("b", led), mk("c", led)
	for _, s := range []*Scheduler{a, b, c} {
		s.pass(ctx)
	}
	if !a.Leader() || b.Leader() || c.Leader() {
		t.Fatal("a should lead alone")
	}
	clock.add(time.Hour)
	a.pass(ctx) // 10:00 fired by a
	cutA.mu.Lock()
	cutA.cut = true
	cutA.mu.Unlock()
	clock.add(500 * time.Millisecond) // past half the lease without a renewal
	a.pass(ctx)
	if a.Leader() {
		t.Fatal("a still believes it leads after half its lease without a renewal")
	}
	clock.add(time.Hour) // 11:00 due
	deadline := time.Now().Add(5 * time.Second)
	for !b.Leader() && !c.Leader() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		b.pass(ctx)
		c.pass(ctx)
		a.pass(ctx) // still cut: must not fire
	}
	if !b.Leader() && !c.Leader() {
		t.Fatal("nobody took over from the partitioned leader")
	}
	b.pass(ctx)
	c.pass(ctx)
	runs, _ := led.Runs(ctx, "recs", 0)
	seen := map[string]int{}
	for _, r := range runs {
		seen[r.Params["scheduled_for"]]++
	}
	if len(runs) != 2 || seen["2026-03-01T10:00:00Z"] != 1 || seen["2026-03-01T11:00:00Z"] != 1 {
		t.Fatalf("runs per tick: %v, want 10:00 and 11:00 once each", seen)
	}
}
