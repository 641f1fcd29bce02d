package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/lookup/client"
)

// TestServeDuringRefresh polls the API with batchGet while a refresh runs:
// every response carries one run (never a mix of two), the old run until the
// publish and the new one after it, never going back.
func TestServeDuringRefresh(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "recs"
	dir := workdir(t)
	spec := writeSpec(t, dir, "jobs/recs.yaml", recsSpec)
	env := append(sinkEnv(pg.DSN, rd, ns), "PRECOG_API_TOKENS=tok")
	for _, sub := range []string{"models", "data"} {
		if err := symlink(filepath.Join(fixtures, sub), filepath.Join(dir, "jobs", sub)); err != nil {
			t.Fatal(err)
		}
	}
	if r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}

	addr := freeAddr(t)
	srv := exec.Command(precogBin, "serve", "--jobs", filepath.Join(dir, "jobs"), "--param", "date=2026-11-01", "--addr", addr)
	srv.Dir = dir
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	c := client.New("http://"+addr, "tok", client.WithTimeout(2*time.Second))
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = testgen.KeyString(int64(i * 70))
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	var first string
	for {
		res, err := c.BatchGet(ctx, ns, keys)
		if err == nil && res[0].Found {
			first = res[0].Prediction.ComputedAt
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("API never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var (
		mu      sync.Mutex
		seen    []string // computed_at of each response, in order
		stop    = make(chan struct{})
		pollErr error
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := c.BatchGet(ctx, ns, keys)
			if err != nil {
				mu.Lock()
				pollErr = err
				mu.Unlock()
				return
			}
			at := ""
			for i, r := range res {
				if !r.Found {
					mu.Lock()
					pollErr = fmt.Errorf("key %s missing during refresh", keys[i])
					mu.Unlock()
					return
				}
				if r.Prediction.Source != "redis" {
					mu.Lock()
					pollErr = fmt.Errorf("key %s from %s during refresh", keys[i], r.Prediction.Source)
					mu.Unlock()
					return
				}
				if at == "" {
					at = r.Prediction.ComputedAt
				} else if at != r.Prediction.ComputedAt {
					mu.Lock()
					pollErr = fmt.Errorf("one response mixes runs %s and %s", at, r.Prediction.ComputedAt)
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			seen = append(seen, at)
			mu.Unlock()
		}
	}()
	r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01")
	// The poller goes on until it has read the new run (a publish notice
	// or the API's safety-net poll), bounded.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		done := pollErr != nil || (len(seen) > 0 && seen[len(seen)-1] != first)
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
	}
	close(stop)
	wg.Wait()
	if r.code != 0 {
		t.Fatalf("refresh: %d %s", r.code, r.stderr)
	}
	if pollErr != nil {
		t.Fatal(pollErr)
	}
	switches := 0
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1] {
			switches++
			if seen[i] == first {
				t.Fatalf("went back to the old run after the switch")
			}
		}
	}
	if len(seen) < 10 || seen[0] != first || switches != 1 {
		t.Fatalf("%d responses, first %s (old %s), %d switches; want old then new, one switch", len(seen), seen[0], first, switches)
	}

	// Live inference on the same inputs as the batch job gives the same
	// values, bit for bit: a brand-new key with user-140's features.
	d := usersData.Defaults()
	for _, k := range []int64{140, 1999} {
		stored, err := c.Get(ctx, ns, testgen.KeyString(k))
		if err != nil || stored.Source != "redis" {
			t.Fatalf("stored %d: %v %+v", k, err, stored)
		}
		feats := make([]float64, 0, 16)
		for _, f := range d.Row(k).Features {
			feats = append(feats, float64(f))
		}
		live, err := c.Predict(ctx, ns, fmt.Sprintf("brand-new-%d", k), map[string][]float64{"features": feats})
		if err != nil {
			t.Fatal(err)
		}
		if live.Source != "live" || live.ModelVersion != stored.ModelVersion {
			t.Fatalf("live answer: source %s model %s (stored model %s)", live.Source, live.ModelVersion, stored.ModelVersion)
		}
		for _, field := range []string{"items", "scores"} {
			if string(live.Values[field]) != string(stored.Values[field]) {
				t.Errorf("key %d %s: live %s, batch %s", k, field, live.Values[field], stored.Values[field])
			}
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestServeWithoutParamsReloadsModel serves a spec whose source path needs
// a date param without any --param (the published version says what to
// read), then publishes a run made with another model file: live inference
// switches to the new model's version without a restart.
func TestServeWithoutParamsReloadsModel(t *testing.T) {
	pg := testservers.Postgres(t)
	rd := testservers.Redis(t)
	ns := rd.Prefix + "recs"
	dir := t.TempDir()
	spec := writeSpec(t, dir, "jobs/recs.yaml", recsSpec)
	if err := symlink(filepath.Join(fixtures, "data"), filepath.Join(dir, "jobs", "data")); err != nil {
		t.Fatal(err)
	}
	modelPath := filepath.Join(dir, "jobs", "models", "recs.onnx")
	if err := os.MkdirAll(filepath.Dir(modelPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testgen.NewRecs(testgen.DefaultSeed).WriteONNX(modelPath); err != nil {
		t.Fatal(err)
	}
	env := append(sinkEnv(pg.DSN, rd, ns), "PRECOG_API_TOKENS=tok")
	if r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("run with model A: %d %s", r.code, r.stderr)
	}

	addr := freeAddr(t)
	srv := exec.Command(precogBin, "serve", "--jobs", filepath.Join(dir, "jobs"), "--addr", addr)
	srv.Dir = dir
	srv.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	c := client.New("http://"+addr, "tok", client.WithTimeout(2*time.Second))
	ctx := context.Background()
	key := testgen.KeyString(140)
	var stored *client.Prediction
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := c.Get(ctx, ns, key)
		if err == nil {
			stored = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve without --param never answered: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	feats := make([]float64, 0, 16)
	for _, f := range usersData.Defaults().Row(140).Features {
		feats = append(feats, float64(f))
	}
	n := 0
	liveVersion := func() string {
		n++
		p, err := c.Predict(ctx, ns, fmt.Sprintf("brand-new-%d", n), map[string][]float64{"features": feats})
		if err != nil || p.Source != "live" {
			t.Fatalf("live predict: %v %+v", err, p)
		}
		return p.ModelVersion
	}
	vA := stored.ModelVersion
	if v := liveVersion(); v != vA {
		t.Fatalf("live model %s, published model %s", v, vA)
	}

	// Model B over the same path, then a run that publishes it.
	if err := testgen.NewRecs(testgen.DefaultSeed + 1).WriteONNX(modelPath); err != nil {
		t.Fatal(err)
	}
	if r := precogEnv(t, dir, env, "run", spec, "--param", "date=2026-11-01"); r.code != 0 {
		t.Fatalf("run with model B: %d %s", r.code, r.stderr)
	}
	p, err := c.Get(ctx, ns, key)
	for err == nil && p.ModelVersion == vA && time.Now().Before(deadline.Add(30*time.Second)) {
		time.Sleep(50 * time.Millisecond)
		p, err = c.Get(ctx, ns, key)
	}
	if err != nil || p.ModelVersion == vA {
		t.Fatalf("stored record after the second publish: %v %+v", err, p)
	}
	vB := p.ModelVersion
	deadline = time.Now().Add(30 * time.Second)
	for v := liveVersion(); v != vB; v = liveVersion() {
		if v != vA || time.Now().After(deadline) {
			t.Fatalf("live model %s after publishing model %s (was %s)\n%s", v, vB, vA, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
