package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/runner/model"
)

// TestWorkerChecksDevicesAtStart: a device the worker cannot use fails it
// at start (exit 2, naming the device and the reason), before it connects
// to the ledger or claims a shard it could only fail.
func TestWorkerChecksDevicesAtStart(t *testing.T) {
	dir := t.TempDir()
	// Port 1 on loopback: were the devices not checked first, the worker
	// would fail on the ledger (exit 75) instead.
	const db = "postgres://precog@127.0.0.1:1/precog?connect_timeout=2"
	r := precog(t, dir, "worker", "--db", db, "--devices", "cpu,tpu:0")
	if r.code != 2 || !strings.Contains(r.stderr, `--devices: "tpu:0" is not cpu or cuda:N`) {
		t.Fatalf("worker --devices cpu,tpu:0: exit %d, stderr:\n%s\nwant exit 2 naming the device", r.code, r.stderr)
	}
	if model.CheckDevice("cuda:0") == nil {
		t.Log("this ONNX Runtime build has the CUDA execution provider: the CPU-only case is not checked here")
		return
	}
	r = precog(t, dir, "worker", "--db", db, "--devices", "cuda:0")
	if r.code != 2 || !strings.Contains(r.stderr, "cuda:0 requested but this ONNX Runtime build has no CUDA execution provider") {
		t.Fatalf("worker --devices cuda:0 on a CPU-only build: exit %d, stderr:\n%s\nwant exit 2 saying there is no CUDA provider", r.code, r.stderr)
	}
}

// TestWorkerWaitsForLedgerAtStart: a worker that starts while its Postgres
// ledger is down (a restart or failover under a rolling deploy) retries
// with backoff and becomes ready once the server is back, instead of
// exiting 75 at once as it did (TestClusterPostgresRestart's second worker,
// still starting when the server restarted, died of it); with
// --ledger-wait 0 it exits 75 at once, as every CLI command does.
func TestWorkerWaitsForLedgerAtStart(t *testing.T) {
	dir := t.TempDir()
	pg := testservers.NewPostgres(t)
	pg.Stop(t)

	r := precog(t, dir, "worker", "--db", pg.DSN, "--ledger-wait", "0")
	if r.code != 75 || !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("worker --ledger-wait 0 with the ledger down: exit %d, want 75\n%s", r.code, r.stderr)
	}

	var log lockedBuffer
	cmd := exec.Command(precogBin, "--state-dir", filepath.Join(dir, ".precog"), "worker", "--db", pg.DSN, "--ledger-wait", "5m")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	waitLog := func(what, want string) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(log.String(), want); time.Sleep(50 * time.Millisecond) {
			select {
			case err := <-done:
				t.Fatalf("worker exited (%v) before %s:\n%s", err, what, log.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker: no %s in 2 minutes:\n%s", what, log.String())
			}
		}
	}
	waitLog("retry of the unreachable ledger", "ledger unreachable; retrying")
	pg.Start(t)
	waitLog("readiness once the ledger is back", "worker ready")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("worker after SIGTERM: %v\n%s", err, log.String())
	}
	done <- nil
}
