package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/profile"
)

// TestClusterChecksHoldShiftedModel: on the cluster path (Postgres ledger,
// workers, Postgres and Parquet sinks), a model swapped for one whose
// output distribution differs is held by max_psi with nothing changed in
// Postgres; publish --accept then cuts the view over.
func TestClusterChecksHoldShiftedModel(t *testing.T) {
	ctx := context.Background()
	led := clusterLedger(t)
	dir, _ := fixture(t, dataset)
	pg := testservers.Postgres(t)
	body, err := os.ReadFile(filepath.Join(dir, "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte("  parquet: { path: out }\n"),
		fmt.Appendf(nil, "  parquet: { path: out }\n  postgres: { dsn: %q, table: scores_checked }\n", pg.DSN), 1)
	body = append(body, "checks:\n  rows: { min_ratio: 0.9 }\n  outputs:\n    score: { max_psi: 0.2, range: [0, 1] }\n"...)
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	load := func() *jobs.Spec {
		spec, err := jobs.Load(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	_, stop := startWorkers(t, led, 2, WorkerOptions{Lease: 3 * time.Second})
	defer stop()
	first := waitRun(t, led, submit(t, led, load()).ID, time.Minute)
	if first.State != jobs.RunSucceeded {
		t.Fatalf("first run %s: %s", first.State, first.Error)
	}
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	view := func() (n int64, mv string) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*), min(model_version) FROM scores_checked`).Scan(&n, &mv); err != nil {
			t.Fatal(err)
		}
		return n, mv
	}
	n1, mv1 := view()

	// The model file is replaced by another export (other weights).
	if err := testgen.NewRanker(testgen.DefaultSeed + 1).WriteONNX(filepath.Join(dir, "models", "ranker.onnx")); err != nil {
		t.Fatal(err)
	}
	held := waitRun(t, led, submit(t, led, load()).ID, time.Minute)
	if held.State != jobs.RunHeld {
		t.Fatalf("run with a swapped model is %s (%s), want held", held.State, held.Error)
	}
	if n, mv := view(); n != n1 || mv != mv1 {
		t.Fatalf("a held run changed Postgres: %d rows of %s, was %d of %s", n, mv, n1, mv1)
	}
	b, err := led.CheckReport(ctx, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rep profile.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("psi %+v", findCheck(rep, "outputs.score.max_psi"))
	if c := findCheck(rep, "outputs.score.max_psi"); c.Passed || c.Value <= 0.2 {
		t.Fatalf("max_psi did not hold the run: %+v", rep.Checks)
	}
	if c := findCheck(rep, "rows.min_ratio"); !c.Passed || c.Value != 1 {
		t.Fatalf("rows: %+v", c)
	}
	// Nothing else may take the held run over.
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: held.ID, Worker: "w9", Lease: time.Minute}); !errors.Is(err, ledger.ErrRunFinished) {
		t.Fatalf("ClaimPublish of a held run: %v", err)
	}
	stop()
	pub, err := PublishHeld(ctx, HeldOptions{Ledger: led, RunID: held.ID, By: "alice", Reason: "new model export reviewed"})
	if err != nil || pub.State != jobs.RunSucceeded {
		t.Fatalf("accept: %s %v", pub.State, err)
	}
	if n, mv := view(); n != n1 || mv != held.ModelVersion {
		t.Fatalf("after accept Postgres shows %d rows of %s, want %d of %s", n, mv, n1, held.ModelVersion)
	}
}
