package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func waitLost(t *testing.T, l sinks.Lock, within time.Duration) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("Lost not closed within %s", within)
	}
}

// A killed holder's lock is taken over once its lease expires, not before.
func TestLockTakeoverAfterExpiry(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	a := newSink(t, pg, ModeReplace, "preds")
	a.lockTTL = 900 * time.Millisecond
	b, err := New(ctx, testJob, a.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	run := sinktest.NewRun("v1", false, nil)
	ha := sinks.ThisProcess(run)
	la, err := a.Lock(ctx, run, ha)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()                                  // the process dies: no renewal, no release
	other := sinktest.NewRun("v2", false, nil) // another run of the same target
	hb := sinks.ThisProcess(other)
	hb.PID++
	_, err = b.Lock(ctx, other, hb)
	var le *sinks.LockedError
	if !errors.As(err, &le) || le.Holder != ha {
		t.Fatalf("Lock during the lease = %v, want a LockedError naming %+v", err, ha)
	}
	waitLost(t, la, 2*time.Second) // the dead holder could not renew
	deadline := time.Now().Add(5 * time.Second)
	for {
		lb, err := b.Lock(ctx, other, hb)
		if err == nil {
			_ = lb.Release(ctx)
			return
		}
		if !errors.As(err, &le) || time.Now().After(deadline) {
			t.Fatalf("Lock after expiry: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A renewal that finds the row taken over closes Lost, and Release then
// leaves the new holder's row alone.
func TestLockLostOnTheft(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	s := newSink(t, pg, ModeUpsert, "scores")
	defer s.Close()
	s.lockTTL = 600 * time.Millisecond
	run := sinktest.NewRun("v1", false, map[string]string{"date": "2024-11-01"})
	l, err := s.Lock(ctx, run, sinks.ThisProcess(run))
	if err != nil {
		t.Fatal(err)
	}
	// Another date is another target in upsert mode.
	other := sinktest.NewRun("v2", false, map[string]string{"date": "2024-11-02"})
	l2, err := s.Lock(ctx, other, sinks.ThisProcess(other))
	if err != nil {
		t.Fatalf("Lock of another partition: %v", err)
	}
	defer l2.Release(ctx)
	pg.Exec(t, "UPDATE "+s.ident(tabLocks)+" SET token = 'thief' WHERE target = $1", s.lockTarget(run))
	waitLost(t, l, 2*time.Second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, "SELECT count(*) FROM "+s.ident(tabLocks)+" WHERE token = 'thief'"); n != 1 {
		t.Fatal("Release deleted the new holder's row")
	}
}

// A renewal that cannot complete before the lease ends (the lock table is
// blocked) closes Lost.
func TestLockLostWhenRenewalBlocked(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	s.lockTTL = 600 * time.Millisecond
	run := sinktest.NewRun("v1", false, nil)
	l, err := s.Lock(ctx, run, sinks.ThisProcess(run))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	tx, err := pg.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+s.ident(tabLocks)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l, 2*time.Second)
}

// A lock left by a killed earlier process of the same run is taken over at
// once (resume after kill -9 must not wait for the lease).
func TestLockTakeoverBySameRun(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	a := newSink(t, pg, ModeReplace, "preds")
	b, err := New(ctx, testJob, a.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	run := sinktest.NewRun("v1", false, nil)
	if _, err := a.Lock(ctx, run, sinks.ThisProcess(run)); err != nil {
		t.Fatal(err)
	}
	a.Close() // killed: the row stays until its lease ends
	h := sinks.ThisProcess(run)
	h.PID++
	lb, err := b.Lock(ctx, run, h)
	if err != nil {
		t.Fatalf("the same run's next process: %v", err)
	}
	_ = lb.Release(ctx)
}

// A frozen attempt (its worker stopped mid-COPY, its lease lost) holds the
// shard's row; the next attempt ends its session after a short wait
// instead of waiting for ever, and commits. It ends that session only: an
// attempt at the same shard of the same table and version in another
// schema (another job or environment on the server) goes on and commits.
func TestFrozenAttemptDoesNotHoldTheShard(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	ctx := context.Background()
	s := newSink(t, pg, ModeReplace, "preds")
	run := sinktest.NewRun("v1", false, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	bystanderSink := newSink(t, pg, ModeReplace, "preds") // same table name, another schema
	defer bystanderSink.Close()
	if err := bystanderSink.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	bystander, err := bystanderSink.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := s.Shard(ctx, run, 0) // begun, never committed nor aborted
	if err != nil {
		t.Fatal(err)
	}
	_ = frozen
	defer func() {
		if err := bystander.Commit(ctx); err != nil {
			t.Errorf("the other schema's attempt at the same shard: %v (its session was ended)", err)
		}
	}()
	other, err := New(ctx, testJob, s.spec) // another worker's sink
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	start := time.Now()
	w, err := other.Shard(ctx, run, 0)
	if err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("second attempt's commit: %v", err)
	}
	if d := time.Since(start); d > 4*shardLockWait {
		t.Fatalf("the second attempt waited %s", d)
	}
}

// TestTakeoverEndsFrozenHoldersTransaction: a holder frozen inside a DDL
// transaction (its stage or publish: it holds the table's advisory lock)
// does not hold up the writer that takes its lock over (here an earlier
// process of the same run, as a cluster worker that got the run's publish
// lease): the taker ends the frozen session, and its own Stage goes
// through while the frozen transaction would still be open. Before, the
// taker waited for the server's idle-in-transaction timeout.
func TestTakeoverEndsFrozenHoldersTransaction(t *testing.T) {
	old := idleInTxTimeout
	idleInTxTimeout = 10 * time.Minute // never the reason the frozen session ends
	t.Cleanup(func() { idleInTxTimeout = old })
	pg := testservers.Postgres(t)
	ctx := context.Background()
	a := newSink(t, pg, ModeReplace, "frozen_ddl")
	run := sinktest.NewRun("v1", false, nil)
	prepareRun(t, a, run, 0, 20)
	ha := sinks.ThisProcess(run)
	if _, err := a.Lock(ctx, run, ha); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	frozenDone := make(chan error, 1)
	go func() {
		frozenDone <- a.ddl(ctx, "frozen stage", func(tx pgx.Tx) error {
			close(entered)
			<-release // frozen while it holds the advisory lock
			return nil
		})
	}()
	<-entered
	b, err := New(ctx, testJob, a.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hb := ha
	hb.PID++
	lb, err := b.Lock(ctx, run, hb)
	if err != nil {
		t.Fatalf("Lock by another process of the run: %v", err)
	}
	defer lb.Release(ctx)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = b.Stage(sctx, run, []sinks.CommittedShard{{Index: 0, Rows: 20}})
	close(release)
	if err != nil {
		t.Fatalf("Stage by the new holder while the frozen one's transaction is open: %v", err)
	}
	if err := <-frozenDone; err == nil {
		t.Fatal("the frozen holder's transaction committed after its session was ended")
	}
}

// prepareRun prepares run in s and commits rows [from, from+n) as shard 0.
func prepareRun(t *testing.T, s *Sink, run sinks.RunInfo, from, n int) {
	t.Helper()
	ctx := context.Background()
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Batch(run, from, n)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
