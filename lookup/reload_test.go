package lookup

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

// A publish whose model file changed swaps live inference to the new model
// without a restart; a publish with the same model keeps the one loaded.
func TestModelReloadedOnPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{hashVersion: true})
	e.publishRedis("r1", map[string]string{})
	f := features(11)
	in := make([]float64, len(f))
	for i, v := range f {
		in[i] = float64(v)
	}
	n := 0
	predict := func() (string, float64) {
		n++ // a fresh key each time: nothing stored, nothing shared
		body, _ := json.Marshal(map[string]any{"key": fmt.Sprintf("fresh-%d", n), "inputs": map[string]any{"features": in}})
		code, b := e.do("POST", "/v1/predictions/"+e.ns+":predict", string(body), token)
		if code != 200 || b["source"] != "live" {
			t.Fatalf("predict: %d %v", code, b)
		}
		return fmt.Sprint(b["model_version"]), b["values"].(map[string]any)["score"].(float64)
	}
	score := func(m *testgen.Model) float64 {
		out, err := m.Reference(f, 1)
		if err != nil {
			t.Fatal(err)
		}
		return float64(out["score"].Float32[0])
	}
	vA, sA := predict()
	if math.Abs(sA-score(e.model)) > 1e-5 {
		t.Fatalf("model A scores %v, reference %v", sA, score(e.model))
	}

	// The batch job publishes with model B, written over model.path.
	b := testgen.NewRanker(testgen.DefaultSeed + 1)
	if err := b.WriteONNX(e.srv.ns[e.ns].spec.Model.Path); err != nil {
		t.Fatal(err)
	}
	e.publishRedis("r2", map[string]string{})
	waitUntil(t, "model B in service", func() bool { v, _ := predict(); return v != vA })
	vB, sB := predict()
	if math.Abs(sB-score(b)) > 1e-5 || math.Abs(sB-sA) < 1e-6 {
		t.Fatalf("after the publish: version %s score %v; model B's reference %v (A's %v)", vB, sB, score(b), sA)
	}

	// The same model published again: nothing changes.
	e.publishRedis("r3", map[string]string{})
	waitUntil(t, "r3", func() bool { v, _ := e.srv.ns[e.ns].redis.version(); return v == "r3" })
	if v, _ := predict(); v != vB {
		t.Fatalf("a publish with the same model changed the version to %s", v)
	}
	if code, body := e.do("GET", "/readyz", "", ""); code != 200 || body["checks"].(map[string]any)[e.ns+"/model"] != "ok: "+vB {
		t.Errorf("readyz after the reload: %d %v", code, body)
	}
}

// A spec whose batch-only fields need run params loads for serving
// without them; given params are still used and kept.
func TestLoadServingSpecWithoutParams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	yaml := `name: recs
source:
  parquet: { path: "data/dt={{.date}}/{{ .snapshot }}" }
  key: user_id
model:
  path: m.onnx
  inputs: { features: { columns: [f0] } }
  outputs: { score: score }
sinks:
  parquet: { path: "out/date={{.date}}" }
  redis: { addr: "127.0.0.1:1", namespace: recs }
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Load(path, nil); err == nil {
		t.Fatal("jobs.Load accepted the spec without its params; the test shows nothing")
	}
	spec, err := LoadServingSpec(path, nil)
	if err != nil {
		t.Fatalf("without params: %v", err)
	}
	if spec.Sinks.Redis.Namespace != "recs" || len(spec.Params) != 0 {
		t.Fatalf("spec: namespace %q, params %v", spec.Sinks.Redis.Namespace, spec.Params)
	}
	spec, err = LoadServingSpec(path, map[string]string{"date": "2026-11-01"})
	if err != nil || spec.Params["date"] != "2026-11-01" || len(spec.Params) != 1 || !strings.Contains(spec.Source.Parquet.Path, "dt=2026-11-01") {
		t.Fatalf("with a date: %v %+v", err, spec)
	}
	// Other problems still fail, naming the field.
	if err := os.WriteFile(path, []byte(strings.Replace(yaml, "key: user_id", "kee: user_id", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServingSpec(path, nil); err == nil || !strings.Contains(err.Error(), "kee") {
		t.Fatalf("misspelt field: %v", err)
	}
}

// A served field (here the Redis namespace of a backfill's partitions)
// that uses a run parameter serving was not given is refused, naming the
// field, the parameter and the --param that serves one value: rendered
// with the placeholder, the API served iris-bf-unset-when-serving and
// /readyz said ok. Given the parameter, that partition is served.
func TestServingRefusesTemplatedNamespace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	yaml := `name: iris-bf
source:
  parquet: { path: "data/dt={{.date}}" }
  key: id
model:
  path: m.onnx
  inputs: { features: { columns: [f0] } }
  outputs: { score: score }
sinks:
  redis: { addr: "127.0.0.1:1", namespace: "iris-bf-{{.date}}" }
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadServingSpec(path, nil)
	if err == nil || !strings.Contains(err.Error(), "sinks.redis.namespace") || !strings.Contains(err.Error(), "--param date=") {
		t.Fatalf("templated namespace without its param: %v, want a refusal naming the field and --param date=", err)
	}
	_, err = New(Config{JobsDir: dir, InsecureNoAuth: true})
	if err == nil || !strings.Contains(err.Error(), "sinks.redis.namespace") {
		t.Fatalf("New over a jobs dir with a templated namespace: %v", err)
	}
	spec, err := LoadServingSpec(path, map[string]string{"date": "2026-11-03"})
	if err != nil || spec.Sinks.Redis.Namespace != "iris-bf-2026-11-03" {
		t.Fatalf("with --param date: %v %+v", err, spec)
	}
}
