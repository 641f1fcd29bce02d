package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
)

var runIDRE = regexp.MustCompile(`^scores-\d{8}t\d{6}\.\d{6}-[0-9a-f]{4}\n$`)

// clusterLedger opens the test's Postgres ledger as a worker would.
func clusterLedger(t *testing.T, dsn string) *postgres.Ledger {
	t.Helper()
	l, err := postgres.Open(context.Background(), dsn, postgres.Options{PollOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// submit runs precog submit and returns the run id it printed.
func submit(t *testing.T, dir, dsn string, args ...string) string {
	t.Helper()
	r := precog(t, dir, append([]string{"submit", "--db", dsn}, args...)...)
	if r.code != 0 || !runIDRE.MatchString(r.stdout) {
		t.Fatalf("submit: exit %d, stdout %q (want the run id alone)\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// TestSubmitRecordsTheRun: submit prints only the run id and stores a
// pending run with the raw spec, params, model version, pool, priority and
// the planned shards; a second submit of the same params is refused naming
// the open run, and nothing more is stored.
func TestSubmitRecordsTheRun(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	body := "pool: gpu\npriority: 3\n" + rankerSpec
	spec := writeSpec(t, dir, "job.yaml", body)
	id := submit(t, dir, pg.DSN, spec, "--param", "date=2026-11-01")

	led := clusterLedger(t, pg.DSN)
	ctx := context.Background()
	run, err := led.Run(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(spec)
	if run.State != jobs.RunPending || string(run.Spec) != body || run.SpecFile != abs || run.Params["date"] != "2026-11-01" ||
		run.ParamsKey != "date=2026-11-01" || run.ModelVersion == "" || run.SpecHash == "" || run.Pool != "gpu" || run.Priority != 3 ||
		run.Shards != 4 || !strings.HasPrefix(id, "scores-"+run.Version) && id != "scores-"+run.Version {
		t.Errorf("stored run = %+v", run)
	}
	shards, err := led.Shards(ctx, id)
	if err != nil || len(shards) != 4 || shards[3].EstRows != 1000 || shards[0].State != jobs.ShardPending || len(shards[0].Plan) == 0 {
		t.Fatalf("stored shards = %+v, %v", shards, err)
	}

	r := precog(t, dir, "submit", "--db", pg.DSN, spec, "--param", "date=2026-11-01", "--priority", "9")
	if r.code != 2 || !strings.Contains(r.stderr, id) || !strings.Contains(r.stderr, "already has run") || r.stdout != "" {
		t.Fatalf("second submit: exit %d, stdout %q, stderr %s; want exit 2 naming %s", r.code, r.stdout, r.stderr, id)
	}
	// Another date is another run; --priority overrides the spec's.
	other := submit(t, dir, pg.DSN, spec, "--param", "date=2026-11-02", "--priority", "-7")
	if run, err := led.Run(ctx, other); err != nil || run.Priority != -7 {
		t.Errorf("--priority -7: run %+v, %v", run, err)
	}
	if r := precog(t, dir, "submit", "--db", pg.DSN, spec, "--param", "date=2026-11-01", "--priority", "5000"); r.code != 2 || !strings.Contains(r.stderr, "--priority") {
		t.Errorf("--priority 5000: exit %d, %s", r.code, r.stderr)
	}
	if runs, _ := led.Runs(ctx, "", 0); len(runs) != 2 {
		t.Errorf("ledger holds %d runs, want 2", len(runs))
	}
}

// TestSubmitInvalidStoresNothing: a spec that validate refuses is refused
// by submit with exit 2, and the ledger stays empty; without a database
// submit says how to name one.
func TestSubmitInvalidStoresNothing(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	for name, body := range map[string]string{
		"missing column": strings.Replace(rankerSpec, "f3,", "f3x,", 1),
		"bad field":      rankerSpec + "bogus: 1\n",
	} {
		spec := writeSpec(t, dir, "bad.yaml", body)
		r := precog(t, dir, "submit", "--db", pg.DSN, spec, "--param", "date=2026-11-01")
		if r.code != 2 || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, want 2 and nothing\n%s", name, r.code, r.stdout, r.stderr)
		}
	}
	r := precog(t, dir, "runs", "--json", "--db", pg.DSN)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("runs after refused submits: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	t.Setenv(envDatabaseURL, "")
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	if r := precog(t, dir, "submit", spec, "--param", "date=2026-11-01"); r.code != 2 || !strings.Contains(r.stderr, "--db") {
		t.Errorf("submit without a database: exit %d, %s", r.code, r.stderr)
	}
}

// TestClusterRunsStatusCancel: runs/status --json answer the contract's
// shape from the Postgres ledger (through --db or PRECOG_DATABASE_URL),
// status shows failed shards and workers, cancel marks the run cancelled
// and cleans its sinks, and unknown runs are exit 2.
func TestClusterRunsStatusCancel(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	id := submit(t, dir, pg.DSN, spec, "--param", "date=2026-11-01")
	led := clusterLedger(t, pg.DSN)
	ctx := context.Background()
	// A worker fails shard 0 for good and holds shard 1.
	if _, sh, err := led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: jobs.DefaultPool, Worker: "worker-a", Lease: time.Minute}); err != nil || sh.Index != 0 {
		t.Fatal(sh, err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: id, Shard: 0, Worker: "worker-a", Msg: "model exploded on row 7", Retry: false, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: jobs.DefaultPool, Worker: "worker-b", Lease: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}

	r := precog(t, dir, "runs", "--json", "--db", pg.DSN)
	var runs []map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &runs) != nil || len(runs) != 1 {
		t.Fatalf("runs --json: exit %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	for _, k := range []string{"id", "job", "state", "rows_done", "rows_total", "rejected", "shards", "scheduled_for", "created_at", "finished_at", "error", "rows_per_s", "duration_s"} {
		if _, ok := runs[0][k]; !ok {
			t.Errorf("runs --json lacks %q: %s", k, r.stdout)
		}
	}
	t.Setenv(envDatabaseURL, pg.DSN)
	r = precog(t, dir, "status", id, "--json")
	var v runview.Run
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
		t.Fatalf("status --json: exit %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	if v.ID != id || v.State != "running" || v.RowsTotal != 4000 || v.Shards != (runview.ShardCounts{Pending: 2, Running: 1, Failed: 1}) || v.FinishedAt != "" {
		t.Errorf("status --json = %+v", v)
	}
	r = precog(t, dir, "status", id)
	for _, want := range []string{"0 committed, 1 running, 2 pending, 1 failed (of 4)", "worker-b (1)", "shard 0 (1 attempts): model exploded on row 7", "rows/s"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q: exit %d\n%s%s", want, r.code, r.stdout, r.stderr)
		}
	}
	if r := precog(t, dir, "runs"); r.code != 0 || !strings.Contains(r.stdout, "ROWS/S") || !strings.Contains(r.stdout, id) {
		t.Errorf("runs table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := precog(t, dir, "status", "scores-nope"); r.code != 2 || !strings.Contains(r.stderr, "scores-nope: not found in the Postgres ledger") {
		t.Errorf("status of an unknown run: exit %d, %s", r.code, r.stderr)
	}

	// A worker prepared the parquet sink (its staging directory); cancel
	// waits for worker-b's lease (2s) and removes it.
	prepareSinks(t, spec, id)
	staged := func() []string {
		var files []string
		filepath.WalkDir(filepath.Join(dir, "out"), func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.Contains(p, id[len("scores-"):]) {
				files = append(files, p)
			}
			return nil
		})
		return files
	}
	if len(staged()) == 0 {
		t.Fatal("preparing the parquet sink staged nothing under out/ naming the run's version")
	}
	r = precog(t, dir, "cancel", id)
	if r.code != 0 || !strings.Contains(r.stdout, "run "+id+" cancelled") || !strings.Contains(r.stdout, "parquet: removed the data of version") {
		t.Fatalf("cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got, err := led.Run(ctx, id); err != nil || got.State != jobs.RunCancelled {
		t.Errorf("after cancel: %+v, %v", got, err)
	}
	if left := staged(); len(left) > 0 {
		t.Errorf("cancel left the run's staging behind: %v", left)
	}
	if err := led.Heartbeat(ctx, ledger.HeartbeatParams{RunID: id, Shard: 1, Worker: "worker-b", Lease: time.Minute}); err == nil {
		t.Error("worker-b's heartbeat after cancel succeeded")
	}
	if r := precog(t, dir, "retry", id); r.code != 2 || !strings.Contains(r.stderr, "cancelled: nothing to retry") || !strings.Contains(r.stderr, "precog submit ") {
		t.Errorf("retry of a cancelled run: exit %d, %s", r.code, r.stderr)
	}
	if r := precog(t, dir, "cancel", id); r.code != 0 || !strings.Contains(r.stdout, "already cancelled") {
		t.Errorf("second cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The job can be submitted again.
	submit(t, dir, pg.DSN, spec, "--param", "date=2026-11-01")
}

// TestClusterRetryAndWait: retry puts an open run's failed shards back to
// pending; submit --wait follows a run that workers finish (exit 0, the id
// alone on stdout) or fail (exit 1 with the shard's error).
func TestClusterRetryAndWait(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	led := clusterLedger(t, pg.DSN)
	ctx := context.Background()

	done := make(chan result, 1)
	go func() { done <- precog(t, dir, "submit", "--db", pg.DSN, spec, "--param", "date=2026-11-01", "--wait") }()
	id := waitForRun(t, led)
	fakeWorker(t, led, id, "")
	r := <-done
	if r.code != 0 || r.stdout != id+"\n" || !strings.Contains(r.stderr, "succeeded") {
		t.Fatalf("submit --wait of a run that succeeds: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}

	go func() { done <- precog(t, dir, "submit", "--db", pg.DSN, spec, "--param", "date=2026-11-02", "--wait") }()
	id = waitForRun(t, led)
	fakeWorker(t, led, id, "disk full on /scratch")
	r = <-done
	if r.code != 1 || !strings.Contains(r.stderr, "shard 2 (1 attempts): disk full on /scratch") || r.stdout != id+"\n" {
		t.Fatalf("submit --wait of a run that fails: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	// A failed run goes back to running with its failed shard pending.
	if r := precog(t, dir, "retry", id, "--db", pg.DSN); r.code != 0 || !strings.Contains(r.stdout, "back to pending") {
		t.Errorf("retry of a failed run: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	if got, _ := led.Run(ctx, id); got.State != jobs.RunRunning || got.Error != "" {
		t.Errorf("the retried run is %s (%q), want running", got.State, got.Error)
	}

	// An open run with a failed shard: retry moves it back to pending.
	id = submit(t, dir, pg.DSN, spec, "--param", "date=2026-11-01")
	if _, err := led.Claim(ctx, id, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: id, Shard: 0, Worker: "w", Msg: "boom", Retry: false, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	r = precog(t, dir, "retry", id, "--db", pg.DSN)
	if r.code != 0 || !strings.Contains(r.stdout, "1 failed shard(s) back to pending") {
		t.Fatalf("retry: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	shards, _ := led.Shards(ctx, id)
	if shards[0].State != jobs.ShardPending || shards[0].Attempts != 0 {
		t.Errorf("shard 0 after retry: %+v", shards[0])
	}
	if r := precog(t, dir, "retry", id, "--db", pg.DSN); r.code != 0 || !strings.Contains(r.stdout, "no failed shards") {
		t.Errorf("second retry: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// waitForRun returns the id of the ledger's open run once submit made it.
func waitForRun(t *testing.T, led *postgres.Ledger) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		runs, err := led.Runs(context.Background(), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if !r.State.Terminal() {
				return r.ID
			}
		}
	}
	t.Fatal("submit created no run")
	return ""
}

// fakeWorker completes the run's shards and publishes it, or fails shard 2
// for good with failMsg and marks the run failed, as a worker would.
func fakeWorker(t *testing.T, led *postgres.Ledger, id, failMsg string) {
	t.Helper()
	ctx := context.Background()
	for {
		_, sh, err := led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: jobs.DefaultPool, Worker: "w1", Lease: time.Minute})
		if errors.Is(err, ledger.ErrNoShard) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // let --wait see progress
		if failMsg != "" && sh.Index == 2 {
			if err := led.Fail(ctx, ledger.FailParams{RunID: id, Shard: 2, Worker: "w1", Msg: failMsg, Retry: false, MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
			if err := led.SetRunState(ctx, id, jobs.RunFailed, "1 shard failed"); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: id, Shard: sh.Index, Worker: "w1", Counts: jobs.Counts{RowsIn: sh.EstRows, RowsOut: sh.EstRows}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: id, Worker: "w1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := led.FinishPublish(ctx, ledger.FinishPublishParams{RunID: id, Worker: "w1", State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterLedgerErrors: an unreachable database is exit 75 without the
// URL's password; a schema newer than this precog is a clear refusal.
func TestClusterLedgerErrors(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	dead := "postgres://u:leak-me@127.0.0.1:1/db?sslmode=disable"
	for _, args := range [][]string{{"runs"}, {"status", "x"}, {"cancel", "x"}, {"retry", "x"}, {"submit", spec, "--param", "date=2026-11-01"}} {
		r := precog(t, dir, append(args, "--db", dead)...)
		if r.code != 75 || strings.Contains(r.stderr+r.stdout, "leak-me") || !strings.Contains(r.stderr, "unreachable") {
			t.Errorf("%v with an unreachable ledger: exit %d, want 75 without the password\n%s", args, r.code, r.stderr)
		}
	}
	pg := testservers.Postgres(t)
	clusterLedger(t, pg.DSN).Close()
	pg.Exec(t, `INSERT INTO precog_schema (version) VALUES ($1)`, postgres.SchemaVersion()+1)
	r := precog(t, dir, "runs", "--db", pg.DSN)
	if r.code != 1 || !strings.Contains(r.stderr, "upgrade precog") {
		t.Errorf("runs on a newer schema: exit %d, %s", r.code, r.stderr)
	}
}

// prepareSinks prepares the sinks of run id as a worker does before its
// first shard.
func prepareSinks(t *testing.T, specPath, id string) {
	t.Helper()
	ctx := context.Background()
	spec, err := jobs.Load(specPath, map[string]string{"date": "2026-11-01"})
	if err != nil {
		t.Fatal(err)
	}
	job, err := runner.OpenJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	snks, err := runner.OpenSinks(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	info := sinks.RunInfo{Job: spec.Name, RunID: id, Version: strings.TrimPrefix(id, spec.Name+"-"), Params: spec.Params, Schema: job.Output, Key: spec.Source.Key}
	for _, s := range snks {
		if err := s.Prepare(ctx, info); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}

// TestRetryEmbedded: retry of an open run of the embedded ledger with a
// failed shard resumes that very run from the spec it recorded: the failed
// shard is recomputed and the run published, equal to the reference.
func TestRetryEmbedded(t *testing.T) {
	t.Setenv(envDatabaseURL, "")
	dir := workdir(t)
	specPath := writeSpec(t, dir, "job.yaml", rankerSpec)
	ctx := context.Background()
	spec, err := jobs.Load(specPath, map[string]string{"date": "2026-11-01"})
	if err != nil {
		t.Fatal(err)
	}
	job, err := runner.OpenJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := job.Source.Plan(ctx, spec.Source.RowsPerShard)
	if err != nil {
		t.Fatal(err)
	}
	run, shards := runner.NewRun(spec, runner.NewRunOptions{ModelVersion: job.Model.Version(), Plans: plans})
	job.Close()
	if err := os.MkdirAll(filepath.Join(dir, ".precog"), 0o755); err != nil {
		t.Fatal(err)
	}
	led, err := bolt.OpenIn(filepath.Join(dir, ".precog"))
	if err != nil {
		t.Fatal(err)
	}
	if err := led.CreateRun(ctx, run, shards); err != nil {
		t.Fatal(err)
	}
	if _, err := led.Claim(ctx, run.ID, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: run.ID, Shard: 0, Worker: "w", Msg: "gpu fell off the bus", Retry: false, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	led.Close()

	r := precog(t, dir, "status", run.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "shard 0 (1 attempts): gpu fell off the bus") {
		t.Fatalf("status (embedded): exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = precog(t, dir, "retry", run.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "run "+run.ID+" succeeded") || !strings.Contains(r.stdout, "4000 in, 4000 out") {
		t.Fatalf("retry (embedded): exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	got := readScores(t, filepath.Join(dir, "out", "scores", "date=2026-11-01"))
	if want := expectedScores(t, usersData, 0); len(got) != len(want) {
		t.Errorf("retried run published %d rows, want %d", len(got), len(want))
	}
	r = precog(t, dir, "runs", "--json")
	var runs []runview.Run
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &runs) != nil || len(runs) != 1 || runs[0].ID != run.ID || runs[0].State != "succeeded" {
		t.Errorf("runs --json after retry: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if r := precog(t, dir, "retry", run.ID); r.code != 2 || !strings.Contains(r.stderr, "succeeded: nothing to retry") {
		t.Errorf("retry of a succeeded run: exit %d, %s", r.code, r.stderr)
	}
}

// TestSubmitWaitInterrupted: Ctrl-C while submit --wait follows a run is
// exit 130 and says that the run keeps going; the run is still open.
func TestSubmitWaitInterrupted(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	cmd := exec.Command(precogBin, "--state-dir", filepath.Join(dir, ".precog"), "submit", "--db", pg.DSN, spec, "--param", "date=2026-11-01", "--wait")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	led := clusterLedger(t, pg.DSN)
	id := waitForRun(t, led)
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 || stdout.String() != id+"\n" || !strings.Contains(stderr.String(), "the run keeps going on the workers") {
		t.Fatalf("interrupted --wait: %v, stdout %q\n%s", err, stdout.String(), stderr.String())
	}
	if r, err := led.Run(context.Background(), id); err != nil || r.State != jobs.RunPending {
		t.Errorf("run after the interrupted wait: %+v, %v", r, err)
	}
}

// TestStatusWatch: status --watch (not a terminal) prints a line per change
// until the run ends, exit 0 when it succeeded; on the embedded ledger it
// is refused.
func TestStatusWatch(t *testing.T) {
	pg := testservers.Postgres(t)
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	id := submit(t, dir, pg.DSN, spec, "--param", "date=2026-11-01")
	led := clusterLedger(t, pg.DSN)
	done := make(chan result, 1)
	go func() { done <- precog(t, dir, "status", id, "--watch", "--db", pg.DSN) }()
	time.Sleep(1500 * time.Millisecond)
	fakeWorker(t, led, id, "")
	r := <-done
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 3 || !strings.Contains(lines[0], "pending rows 0/4000") || !strings.Contains(lines[len(lines)-1], "succeeded rows 4000/4000") {
		t.Fatalf("status --watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv(envDatabaseURL, "")
	if r := precog(t, dir, "status", id, "--watch"); r.code != 2 || !strings.Contains(r.stderr, "--watch follows runs of the Postgres ledger") {
		t.Errorf("--watch on the embedded ledger: exit %d, %s", r.code, r.stderr)
	}
}

// TestReadOnlyCommandsCreateNoLedger: runs, status and workers on a state
// dir where nothing ran say so and leave no ledger (nor state dir)
// behind; they used to create an empty ledger there.
func TestReadOnlyCommandsCreateNoLedger(t *testing.T) {
	t.Setenv(envDatabaseURL, "")
	dir := t.TempDir()
	if r := precog(t, dir, "runs"); r.code != 0 || strings.TrimSpace(r.stdout) != "no runs yet" {
		t.Errorf("runs on a fresh state dir: exit %d, stdout %q, want \"no runs yet\"\n%s", r.code, r.stdout, r.stderr)
	}
	if r := precog(t, dir, "runs", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("runs --json on a fresh state dir: exit %d, stdout %q, want []", r.code, r.stdout)
	}
	if r := precog(t, dir, "status", "recs-20261101t000000-ab12"); r.code != 2 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("status on a fresh state dir: exit %d, want 2 (not found)\n%s", r.code, r.stderr)
	}
	if r := precog(t, dir, "workers"); r.code != 0 || !strings.Contains(r.stdout, "no workers registered") {
		t.Errorf("workers on a fresh state dir: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, ".precog")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read-only command created the state dir: %v", err)
	}
}

// TestDBFlagNeverPrinted: no command's --db shows PRECOG_DATABASE_URL as
// its default in --help (gc's did, password included).
func TestDBFlagNeverPrinted(t *testing.T) {
	t.Setenv(envDatabaseURL, "postgres://u:leak-me@db/precog")
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("db"); f != nil {
			n++
			if strings.Contains(f.DefValue+f.Usage, "leak-me") {
				t.Errorf("%s --db: default %q shows the URL", c.CommandPath(), f.DefValue)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&globals{}))
	if n < 10 {
		t.Fatalf("found --db on %d commands, want the cluster commands'", n)
	}
}
