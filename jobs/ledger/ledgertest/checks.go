package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// testChecksHold: shard profiles are stored and replaced per shard; a
// publisher finishes a run as held (nothing open: a new run of the same job
// and params may start, no shard is claimable); the report is stored; a
// held run is accepted (succeeded, who and why recorded) or discarded
// (cancelled); baselines are per (job, target) and replaced.
func testChecksHold(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "recs", "date=1", 2)
	for i := range 2 {
		s := claim(t, l, r.ID, "w1", longLease)
		if err := l.PutShardProfile(ctx, r.ID, s.Index, "first"); err != nil {
			t.Fatal(err)
		}
		if err := l.PutShardProfile(ctx, r.ID, s.Index, "p"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: 5, RowsOut: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := l.ShardProfiles(ctx, r.ID); err != nil || !reflect.DeepEqual(got, map[int]string{0: "p0", 1: "p1"}) {
		t.Fatalf("ShardProfiles = %v, %v", got, err)
	}
	if _, err := l.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: r.ID, Worker: "w1", Lease: longLease}); err != nil {
		t.Fatal(err)
	}
	report := []byte(`{"passed":false,"checks":[{"name":"rows.min_ratio","value":0.7,"threshold":0.9,"passed":false}]}`)
	if err := l.PutCheckReport(ctx, r.ID, report); err != nil {
		t.Fatal(err)
	}
	if err := l.FinishPublish(ctx, ledger.FinishPublishParams{RunID: r.ID, Worker: "w1", State: jobs.RunHeld, Msg: "checks failed: rows.min_ratio"}); err != nil {
		t.Fatal(err)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunHeld || got.Error == "" {
		t.Fatalf("after a held publish: %s %q", got.State, got.Error)
	}
	got, err := l.CheckReport(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(report, &a)
	if err := json.Unmarshal(got, &b); err != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("CheckReport = %s, %v", got, err)
	}
	if _, err := l.OpenRun(ctx, "recs", "date=1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("OpenRun of a held run's job: %v, want ErrNotFound", err)
	}
	if _, err := l.Claim(ctx, r.ID, "w2", longLease); !errors.Is(err, ledger.ErrRunFinished) {
		t.Fatalf("Claim on a held run: %v, want ErrRunFinished", err)
	}
	next := create(t, l, "recs", "date=1", 1) // a held run blocks nobody
	if err := l.ResolveHold(ctx, ledger.ResolveHoldParams{RunID: next.ID, State: jobs.RunSucceeded, By: "bob", Reason: "x"}); !errors.Is(err, ledger.ErrRunOpen) {
		t.Fatalf("ResolveHold of an open run: %v, want ErrRunOpen", err)
	}
	if _, err := l.Acceptance(ctx, r.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Acceptance before any: %v", err)
	}
	if err := l.ResolveHold(ctx, ledger.ResolveHoldParams{RunID: r.ID, State: jobs.RunSucceeded, By: "alice", Reason: "holiday traffic"}); err != nil {
		t.Fatal(err)
	}
	if got := mustRun(t, l, r.ID); got.State != jobs.RunSucceeded || got.Error != "" {
		t.Fatalf("accepted run: %s %q", got.State, got.Error)
	}
	if acc, err := l.Acceptance(ctx, r.ID); err != nil || acc.By != "alice" || acc.Reason != "holiday traffic" || acc.At.IsZero() {
		t.Fatalf("Acceptance = %+v, %v", acc, err)
	}
	if err := l.ResolveHold(ctx, ledger.ResolveHoldParams{RunID: r.ID, State: jobs.RunCancelled, By: "bob", Reason: "x"}); !errors.Is(err, ledger.ErrRunFinished) {
		t.Fatalf("ResolveHold twice: %v, want ErrRunFinished", err)
	}

	// The local path holds a running run directly; discarding it cancels it.
	claim(t, l, next.ID, "w1", longLease)
	if err := l.Hold(ctx, next.ID, "checks failed"); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold(ctx, next.ID, "again"); !errors.Is(err, ledger.ErrRunFinished) {
		t.Fatalf("Hold of a held run: %v, want ErrRunFinished", err)
	}
	if err := l.ResolveHold(ctx, ledger.ResolveHoldParams{RunID: next.ID, State: jobs.RunCancelled, By: "carol", Reason: "bad upstream"}); err != nil {
		t.Fatal(err)
	}
	if got := mustRun(t, l, next.ID); got.State != jobs.RunCancelled {
		t.Fatalf("discarded run is %s", got.State)
	}

	if _, err := l.Baseline(ctx, "recs", "redis:recs"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Baseline before any: %v", err)
	}
	for _, v := range []string{"v1", "v2"} {
		if err := l.PutBaseline(ctx, ledger.Baseline{Job: "recs", Target: "redis:recs", RunID: r.ID, Version: v, RowsOut: 10, Profile: "prof-" + v}); err != nil {
			t.Fatal(err)
		}
	}
	bl, err := l.Baseline(ctx, "recs", "redis:recs")
	if err != nil || bl.Version != "v2" || bl.Profile != "prof-v2" || bl.RowsOut != 10 || bl.RunID != r.ID {
		t.Fatalf("Baseline = %+v, %v", bl, err)
	}
	if _, err := l.Baseline(ctx, "recs", "redis:other"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Baseline of another target: %v", err)
	}
}
