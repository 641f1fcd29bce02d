package runner

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner/model"
)

// TestCUDAWorker runs a worker with --devices cuda:0 on the embedded
// ledger (no Postgres on a GPU test machine): the run succeeds, and each
// committed shard records the GPU's device-seconds and its rows. It skips
// without a usable cuda:0 (fails with PRECOG_REQUIRE_CUDA set).
func TestCUDAWorker(t *testing.T) {
	if err := model.CheckDevice("cuda:0"); err != nil {
		if os.Getenv("PRECOG_REQUIRE_CUDA") != "" {
			t.Fatalf("PRECOG_REQUIRE_CUDA is set but cuda:0 is unusable: %v", err)
		}
		t.Skipf("no usable cuda:0: %v", err)
	}
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	_, spec := fixture(t, dataset)
	_, stop := startWorkers(t, led, 1, WorkerOptions{Lease: 30 * time.Second, Devices: []string{"cuda:0"}})
	defer stop()
	run := submit(t, led, spec)
	if got := waitRun(t, led, run.ID, 2*time.Minute); got.State != jobs.RunSucceeded {
		t.Fatalf("run = %s (%s), want succeeded", got.State, got.Error)
	}
	shards, err := led.Shards(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := jobs.SumCost(shards)
	if c.DeviceSeconds <= 0 || c.GPURows != 3000 || c.CPUSeconds <= 0 {
		t.Fatalf("run cost %+v, want GPU device-seconds, 3000 GPU rows and CPU seconds", c)
	}
	busy, ok := c.GPUBusy()
	t.Logf("cost: %+v (busy %.0f%%, NVML %v)", c, 100*busy, ok)
}
