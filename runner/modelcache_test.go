package runner

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
)

// TestModelCacheSharesByHashSpecAndDevice: the same file, spec and device
// share one loaded model across runs, concurrent loaders included; other
// content, another binding or another device load their own; unused
// models beyond the bound are closed.
func TestModelCacheSharesByHashSpecAndDevice(t *testing.T) {
	_, spec := fixture(t, dataset)
	c := newModelCache(1)
	defer c.closeAll()
	load := func(ms jobs.ModelSpec) (*model.Model, func()) {
		t.Helper()
		m, release, err := c.load(ms, spec.File)
		if err != nil {
			t.Fatal(err)
		}
		return m, release
	}
	const loaders = 4
	got := make([]*model.Model, loaders)
	releases := make([]func(), loaders)
	var wg sync.WaitGroup
	for i := range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], releases[i] = load(spec.Model)
		}()
	}
	wg.Wait()
	for i := range loaders {
		if got[i] != got[0] {
			t.Fatalf("concurrent loader %d got another model: one load expected", i)
		}
		releases[i]()
		releases[i]() // a second release is a no-op
	}
	again, release := load(spec.Model)
	if again != got[0] {
		t.Fatal("the next run of the same model reloaded it")
	}
	rebound := spec.Model
	rebound.BatchSize = 64
	other, releaseOther := load(rebound)
	if other == again {
		t.Fatal("another batch size shared the model")
	}
	release()
	releaseOther()
	if n := len(c.entries); n != 1 {
		t.Fatalf("%d models kept, want the bound (1)", n)
	}

	// New content at the same path is another model.
	first, release := load(spec.Model)
	release()
	time.Sleep(10 * time.Millisecond)
	if err := testgen.NewRanker(7).WriteONNX(spec.Model.Path); err != nil {
		t.Fatal(err)
	}
	second, release := load(spec.Model)
	defer release()
	if second == first || second.Version() == first.Version() {
		t.Fatalf("rewritten model file: got version %s again", second.Version())
	}
}

// TestWorkerReusesModelAcrossRuns: a worker executing two runs of one job
// one after the other loads the model once.
func TestWorkerReusesModelAcrossRuns(t *testing.T) {
	led := clusterLedger(t)
	_, spec := fixture(t, dataset)
	loads := testutil.ToFloat64(modelLoads.WithLabelValues("load"))
	_, stop := startWorkers(t, led, 1, WorkerOptions{Lease: 5 * time.Second})
	defer stop()
	for i := range 2 {
		run := submit(t, led, spec)
		if got := waitRun(t, led, run.ID, time.Minute); got.State != jobs.RunSucceeded {
			t.Fatalf("run %d = %s (%s), want succeeded", i, got.State, got.Error)
		}
	}
	if n := testutil.ToFloat64(modelLoads.WithLabelValues("load")) - loads; n != 1 {
		t.Fatalf("model loaded %v times for two runs of one job, want 1", n)
	}
}
