package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// testSchedulerTicks: a tick is recorded once per (job, scheduled time),
// with its run in the same step; a second leader's attempt changes nothing.
func testSchedulerTicks(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	if _, err := l.LastTick(ctx, "recs"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("LastTick with no ticks = %v, want ErrNotFound", err)
	}
	at := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	run, shards := newRun("recs", "date=2026-11-01", 2)
	tick := ledger.Tick{Job: "recs", ScheduledFor: at, Outcome: ledger.TickFired}
	if err := l.RecordTick(ctx, tick, &run, shards); err != nil {
		t.Fatalf("RecordTick: %v", err)
	}
	if got := mustRun(t, l, run.ID); got.State != jobs.RunPending || got.Shards != 2 {
		t.Fatalf("the fired run = %+v, want pending with 2 shards", got)
	}
	// Another scheduler fires the same tick: refused, no second run.
	run2, shards2 := newRun("recs", "date=2026-11-01x", 1)
	if err := l.RecordTick(ctx, tick, &run2, shards2); !errors.Is(err, ledger.ErrTickExists) {
		t.Fatalf("second RecordTick = %v, want ErrTickExists", err)
	}
	if _, err := l.Run(ctx, run2.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused tick created its run: %v", err)
	}
	// A skipped tick has no run; LastTick is the latest scheduled time.
	if err := l.RecordTick(ctx, ledger.Tick{Job: "recs", ScheduledFor: at.Add(4 * time.Hour), Outcome: ledger.TickSkipped, Reason: "previous run open"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordTick(ctx, ledger.Tick{Job: "recs-other", ScheduledFor: at.Add(8 * time.Hour), Outcome: ledger.TickMissed}, nil, nil); err != nil {
		t.Fatal(err)
	}
	last, err := l.LastTick(ctx, "recs")
	if err != nil || !last.ScheduledFor.Equal(at.Add(4*time.Hour)) || last.Outcome != ledger.TickSkipped || last.Reason != "previous run open" {
		t.Fatalf("LastTick = %+v, %v", last, err)
	}
	// A tick whose run cannot be created (its params have an open run)
	// records nothing.
	run3, shards3 := newRun("recs", "date=2026-11-01", 1)
	err = l.RecordTick(ctx, ledger.Tick{Job: "recs", ScheduledFor: at.Add(12 * time.Hour), Outcome: ledger.TickFired}, &run3, shards3)
	if !errors.Is(err, ledger.ErrRunOpen) {
		t.Fatalf("tick with an open run of its params = %v, want ErrRunOpen", err)
	}
	if last, _ := l.LastTick(ctx, "recs"); !last.ScheduledFor.Equal(at.Add(4 * time.Hour)) {
		t.Fatalf("a failed tick was recorded: %+v", last)
	}
}

// testSchedulerFirstSeen: the first time recorded for a job is kept: later
// and concurrent callers (other replicas, a restarted scheduler) all get it
// back, so they all compute the same first tick; jobs are independent.
func testSchedulerFirstSeen(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	first := time.Date(2026, 11, 1, 2, 55, 30, 123456000, time.UTC)
	got, err := l.FirstSeen(ctx, "recs", first)
	if err != nil || !got.Equal(first) {
		t.Fatalf("FirstSeen of a new job = %v, %v; want %v", got, err, first)
	}
	// Concurrent replicas, each with its own (later) time, all get the first.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := first.Add(time.Duration(i+1) * time.Minute)
			if got, err := l.FirstSeen(ctx, "recs", at); err != nil || !got.Equal(first) {
				errs <- fmt.Errorf("FirstSeen(recs, %v) = %v, %v; want the recorded %v", at, got, err, first)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// An earlier time does not move it either: the first recorded wins.
	if got, err := l.FirstSeen(ctx, "recs", first.Add(-time.Hour)); err != nil || !got.Equal(first) {
		t.Fatalf("FirstSeen with an earlier time = %v, %v; want %v", got, err, first)
	}
	other := first.Add(time.Hour)
	if got, err := l.FirstSeen(ctx, "recs-other", other); err != nil || !got.Equal(other) {
		t.Fatalf("FirstSeen of another job = %v, %v; want %v", got, err, other)
	}
}

// testSchedulerLead: one holder at a time; renewals keep it; it passes on
// when the lease lapses or is resigned.
func testSchedulerLead(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	lead := func(holder string, ttl time.Duration) bool {
		t.Helper()
		ok, err := l.Lead(ctx, "scheduler", holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !lead("a", time.Minute) {
		t.Fatal("a could not take a free lease")
	}
	if !lead("a", time.Minute) {
		t.Fatal("a could not renew its lease")
	}
	if lead("b", time.Minute) {
		t.Fatal("b took a live lease")
	}
	if err := l.Resign(ctx, "scheduler", "b"); err != nil { // not b's: no effect
		t.Fatal(err)
	}
	if lead("b", time.Minute) {
		t.Fatal("b's Resign released a's lease")
	}
	if err := l.Resign(ctx, "scheduler", "a"); err != nil {
		t.Fatal(err)
	}
	if !lead("b", 300*time.Millisecond) {
		t.Fatal("b could not take a resigned lease")
	}
	time.Sleep(500 * time.Millisecond)
	if !lead("a", time.Minute) {
		t.Fatal("a could not take a lapsed lease")
	}
	if lead("b", time.Minute) {
		t.Fatal("b renewed a lease it lost")
	}
}
