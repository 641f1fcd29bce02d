package bench

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestGPUChecksOnCPU runs the GPU check's model and worker checks on the
// CPU (the same code `precog gpu-check -check models|worker` runs on
// cuda:0): every test model and text model matches its reference, and a
// worker runs a job to success and records its CPU cost.
func TestGPUChecksOnCPU(t *testing.T) {
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx := context.Background()
	if err := checkModels(ctx, "cpu", out); err != nil {
		t.Fatalf("models: %v", err)
	}
	if err := checkWorker(ctx, "cpu", out); err != nil {
		t.Fatalf("worker: %v", err)
	}
	b, _ := os.ReadFile(out.Name())
	for _, want := range []string{"recs on cpu: 200 rows", "text-wordpiece-384 on cpu: 700 rows", "worker on cpu: run "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("output lacks %q:\n%s", want, b)
		}
	}
	t.Logf("\n%s", b)
}

// TestGPUCheckFailsOnAnUnusableDevice: a device the runtime cannot use
// fails the check (with the reason), never passes it silently: cuda:4095
// exists on no machine, with or without a GPU and the CUDA provider.
func TestGPUCheckFailsOnAnUnusableDevice(t *testing.T) {
	err := checkModels(context.Background(), "cuda:4095", os.Stdout)
	if err == nil {
		t.Fatal("the check passed on cuda:4095, a device no machine has")
	}
	if !strings.Contains(err.Error(), "cuda:4095") {
		t.Fatalf("error %q does not name the device", err)
	}
}
