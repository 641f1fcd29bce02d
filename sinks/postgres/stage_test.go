package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// A key written by two shards is found by Stage, named with both shards,
// and nothing is published.
func TestStageDuplicateAcrossShards(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	run := sinktest.NewRun("v1", true, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 50, true)
	writeRows(t, s, run, 3, 100, 150, true)
	writeRows(t, s, run, 5, 149, 160, true) // key 149 again
	err := s.Stage(ctx, run, commits.committed(s, run))
	var de *sinks.DuplicateKeyError
	if !errors.As(err, &de) {
		t.Fatalf("Stage = %v, want a *sinks.DuplicateKeyError", err)
	}
	want := sinktest.Want(run, 149, 150)
	for k := range want {
		if de.Key != k || de.First != "shard 3" || de.Second != "shard 5" || de.Sink != "postgres" {
			t.Fatalf("DuplicateKeyError %+v, want key %s at shard 3 and shard 5", de, k)
		}
	}
	if err := s.Publish(ctx, run); err == nil {
		t.Fatal("Publish of a run that failed Stage succeeded")
	}
	if v, err := s.Current(ctx, run); err != nil || v != "" {
		t.Fatalf("Current = %q, %v; want nothing published", v, err)
	}
}

// Rows of a shard index the ledger did not commit (an abandoned attempt
// that committed to the store but not to the ledger) are not published.
func TestStageDropsUncommittedShards(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	run := sinktest.NewRun("v1", false, nil)
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run, 0, 0, 50, true)
	writeRows(t, s, run, 1, 50, 100, true)
	writeRows(t, s, run, 9, 100, 120, true)
	committed := commits.committed(s, run)[:2] // the ledger knows shards 0 and 1
	if err := s.Stage(ctx, run, committed); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	snap, err := readSnapshot(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(snap.Rows, sinktest.Want(run, 0, 100)); d != "" || snap.Records != 100 {
		t.Fatalf("published %d records: %s", snap.Records, d)
	}
	// Publish without Stage is refused.
	run2 := sinktest.NewRun("v2", false, nil)
	if err := s.Prepare(ctx, run2); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, run2, 0, 0, 5, true)
	if err := s.Publish(ctx, run2); err == nil {
		t.Fatal("Publish without Stage succeeded")
	}
}
