package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// Of 8 writers racing to take over the same lapsed lock on a real S3
// server, exactly one holds it and the 7 others are told who does, round
// after round: the takeover is one conditional PUT (If-Match on the ETag
// read), not delete-then-create, whose late delete could remove the
// winner's lock and let a second writer in.
func TestObjectLockTakeoverRace(t *testing.T) {
	t.Parallel()
	srv := testservers.S3(t)
	ctx := context.Background()
	const takers, rounds = 8, 6
	sinksN := make([]*ObjectSink, takers)
	for i := range sinksN {
		sinksN[i] = newObjectSink(t, srv.URL("race/date={{.date}}"))
		defer sinksN[i].Close()
	}
	for r := range rounds {
		run := sinktest.NewRun("v1", false, map[string]string{"date": fmt.Sprint(r)})
		tgt, err := sinksN[0].target(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		plantLock(t, srv, tgt.lock(), objectLockRecord{Holder: sinks.Holder{Job: testJob, RunID: "frozen"}, Token: "frozen", Expires: time.Now().Add(-time.Minute)})
		start := make(chan struct{})
		locks := make([]sinks.Lock, takers)
		errs := make([]error, takers)
		var wg sync.WaitGroup
		for i := range takers {
			wg.Go(func() {
				<-start
				locks[i], errs[i] = sinksN[i].Lock(ctx, run, sinks.Holder{Job: testJob, RunID: fmt.Sprint("taker-", i), Lease: time.Hour})
			})
		}
		close(start)
		wg.Wait()
		var won []int
		for i := range takers {
			var le *sinks.LockedError
			switch {
			case errs[i] == nil:
				won = append(won, i)
			case !errors.As(errs[i], &le):
				t.Errorf("round %d: taker %d: %v, want the lock or a LockedError", r, i, errs[i])
			}
		}
		if len(won) != 1 {
			t.Errorf("round %d: %d takers hold the lock (%v), want exactly 1", r, len(won), won)
		}
		for _, i := range won {
			if err := locks[i].Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// A holder frozen past its lease, whose lock was taken over, fails its
// next renewal (the PUT is conditional on the ETag it last wrote), is
// fenced (Lost closes, Publish's check fails), and leaves the new
// holder's lock as it was.
func TestObjectLockStaleRenewFenced(t *testing.T) {
	t.Parallel()
	srv := testservers.S3(t)
	ctx := context.Background()
	run := sinktest.NewRun("v1", false, map[string]string{"date": "1"})
	a := newObjectSink(t, srv.URL("stale/date={{.date}}"))
	defer a.Close()
	b := newObjectSink(t, srv.URL("stale/date={{.date}}"))
	defer b.Close()
	const lease = 300 * time.Millisecond
	la, err := a.Lock(ctx, run, sinks.Holder{Job: testJob, RunID: "a", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	stale := la.(*objectLock)
	stale.Stop() // a freezes: it renews no more
	// b takes over once a's lease lapses (bounded wait on that event).
	var lb sinks.Lock
	for deadline := time.Now().Add(30 * time.Second); ; {
		lb, err = b.Lock(ctx, run, sinks.Holder{Job: testJob, RunID: "b", Lease: time.Hour})
		var le *sinks.LockedError
		if err == nil {
			break
		}
		if !errors.As(err, &le) || time.Now().After(deadline) {
			t.Fatalf("taking over a lapsed lock: %v", err)
		}
		time.Sleep(lease / 10)
	}
	defer lb.Release(ctx)
	if err := stale.renewOnce(ctx); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("the stale holder renewed a lock taken over: %v", err)
	}
	select {
	case <-stale.Lost():
	default:
		t.Fatal("the stale holder's Lost is still open")
	}
	if err := a.fenced(ctx, stale.t); err == nil {
		t.Fatal("the stale holder may still publish")
	}
	cur, _, ok, err := readLock(ctx, stale.t)
	if err != nil || !ok || cur.Holder.RunID != "b" {
		t.Fatalf("after the stale renewal the lock is %+v (exists %v, %v), want b's", cur, ok, err)
	}
	if err := b.fenced(ctx, stale.t); err != nil {
		t.Fatalf("the new holder is fenced: %v", err)
	}
}

// plantLock writes a lock record behind the sink's back (a holder that
// froze long ago).
func plantLock(t *testing.T, srv *testservers.S3Bucket, key string, rec objectLockRecord) {
	t.Helper()
	body, _ := json.Marshal(rec)
	if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(key), Body: strings.NewReader(string(body))}); err != nil {
		t.Fatal(err)
	}
}
