package main

import (
	"strings"
	"testing"

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
