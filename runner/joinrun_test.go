package runner

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// TestJoinRunCreatesThenJoins: precog run --db's run on a real Postgres
// ledger. The first JoinRun creates the run and works on it here until
// WaitRun sees it succeed (every row published once); a second one of the
// same job and params while a run is open joins that run instead of
// creating another; a spec of other work is an *OtherWorkError.
func TestJoinRunCreatesThenJoins(t *testing.T) {
	led := clusterLedger(t)
	ctx := context.Background()
	dir, spec := fixture(t, dataset)
	job, err := OpenJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := job.Source.Plan(ctx, spec.Source.RowsPerShard)
	if err != nil {
		t.Fatal(err)
	}
	work := OpenOrCreateParams{Spec: spec, SpecFile: filepath.Join(dir, "job.yaml"), ModelVersion: job.Model.Version(), Plans: plans}
	job.Close()
	quiet := slog.New(slog.DiscardHandler)

	var waited string
	err = JoinRun(ctx, JoinParams{Ledger: led, Work: work, Parallel: 2, StateDir: t.TempDir(), Logger: quiet,
		Wait: func(ctx context.Context, id string) error {
			waited = id
			_, err := WaitRun(ctx, WaitParams{Ledger: led, RunID: id})
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := led.Run(ctx, waited)
	if err != nil || r.State != jobs.RunSucceeded || r.Counts.RowsOut != 3000 {
		t.Fatalf("run %s: %s %+v (%v), want succeeded with 3000 rows", waited, r.State, r.Counts, err)
	}
	if rows := published(t, spec.Sinks.Parquet.Path); len(rows) != 3000 {
		t.Fatalf("published %d keys, want 3000", len(rows))
	}

	// An open run of the same work is joined: Wait is given its id.
	open := submit(t, led, spec)
	var joined string
	stopAtOnce := func(_ context.Context, id string) error { joined = id; return nil }
	if err := JoinRun(ctx, JoinParams{Ledger: led, Work: work, StateDir: t.TempDir(), Logger: quiet, Wait: stopAtOnce}); err != nil {
		t.Fatal(err)
	}
	if joined != open.ID {
		t.Errorf("joined %q, want the open run %s", joined, open.ID)
	}
	other := work
	other.ModelVersion = "another-model"
	err = JoinRun(ctx, JoinParams{Ledger: led, Work: other, StateDir: t.TempDir(), Logger: quiet, Wait: stopAtOnce})
	if oe := (*OtherWorkError)(nil); !errors.As(err, &oe) || oe.Run.ID != open.ID {
		t.Errorf("JoinRun of other work beside open run %s: %v, want an *OtherWorkError naming it", open.ID, err)
	}
}
