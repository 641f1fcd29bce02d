package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
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

// TestModelCacheObjectModel: a model.path on object storage is fetched
// once per version by a worker, shared by its content hash with the same
// model on disk, and fetched again when the object changes.
func TestModelCacheObjectModel(t *testing.T) {
	_, spec := fixture(t, dataset)
	srv := testservers.S3(t)
	data, err := os.ReadFile(spec.Model.Path)
	if err != nil {
		t.Fatal(err)
	}
	put := func(body []byte) {
		t.Helper()
		if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("models/m.onnx"), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	put(data)
	c := newModelCache(4)
	defer c.closeAll()
	remote := spec.Model
	remote.Path = srv.URL("models/m.onnx")
	before := objstore.FetchedBytesWhole()
	m1, rel1, err := c.load(remote, spec.File)
	if err != nil {
		t.Fatal(err)
	}
	defer rel1()
	rebound := remote
	rebound.BatchSize = 64 // another session pool, the same file
	m2, rel2, err := c.load(rebound, spec.File)
	if err != nil {
		t.Fatal(err)
	}
	defer rel2()
	if got := objstore.FetchedBytesWhole() - before; got != int64(len(data)) {
		t.Fatalf("downloaded %d bytes for a %d-byte model loaded twice; want one fetch", got, len(data))
	}
	local, relLocal, err := c.load(spec.Model, spec.File)
	if err != nil {
		t.Fatal(err)
	}
	defer relLocal()
	if m1.Version() != local.Version() || m2.Version() != local.Version() {
		t.Fatalf("versions %s %s from S3, %s from disk", m1.Version(), m2.Version(), local.Version())
	}
	other := filepath.Join(t.TempDir(), "other.onnx")
	if err := testgen.NewRanker(7).WriteONNX(other); err != nil {
		t.Fatal(err)
	}
	data2, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	put(data2)
	m3, rel3, err := c.load(remote, spec.File)
	if err != nil {
		t.Fatal(err)
	}
	defer rel3()
	if m3.Version() == m1.Version() {
		t.Fatal("a changed model object was served from the cache")
	}
}
