package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

// TestScheduleListNeedsNoSinkSecrets: listing schedules reads specs, not
// stores, so a sink's unset ${…} does not stop it.
func TestScheduleListNeedsNoSinkSecrets(t *testing.T) {
	dir := workdir(t)
	writeSpec(t, dir, "jobs/a.yaml", rankerSpec+"  postgres: { dsn: \"${PRECOG_TEST_UNSET_DATABASE_URL}\", table: scores }\nschedule: \"0 6 * * *\"\n")
	r := precog(t, dir, "schedule", "list", "--jobs", "jobs")
	if r.code != 0 || !strings.Contains(r.stdout, "scores") {
		t.Fatalf("schedule list without the sink's secret: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// startPrecogCollecting starts a long-running precog command in dir, its stdout and
// stderr collected, killed at cleanup.
func startPrecogCollecting(t *testing.T, dir string, args ...string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(precogBin, append([]string{"--state-dir", filepath.Join(dir, ".precog")}, args...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return out
}

// waitForSecretsTest polls cond until it holds, failing the test after limit.
func waitForSecretsTest(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeNeverShowsRedisPassword plants a password in a Redis URL
// (redis://:PW@host:port/0, PW from ${…}) against a redis-server with
// requirepass: `run` publishes through it and `serve` reads through it;
// then Redis stops. No output surface may show the password: /readyz,
// /metrics, the error bodies of GET, batchGet and predict, every log
// line of run, serve and dashboard, the dashboard's pages, status and
// runs. go-redis's own complaints come through slog, not as raw lines.
func TestServeNeverShowsRedisPassword(t *testing.T) {
	b := make([]byte, 8)
	rand.Read(b)
	pw := "plantedPW_" + hex.EncodeToString(b)
	rd := testservers.NewRedis(t, "--requirepass", pw)
	dir := workdir(t)
	ns := rd.Prefix + "recs"
	spec := strings.Replace(recsSpec, "  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: user_recs, mode: replace }\n", "", 1)
	spec = strings.Replace(spec, `redis:    { addr: "${TEST_REDIS_ADDR}", db: "${TEST_REDIS_DB}",`, `redis:    { addr: "redis://:${TEST_REDIS_PW}@${TEST_REDIS_ADDR}/0",`, 1)
	if !strings.Contains(spec, "TEST_REDIS_PW") || strings.Contains(spec, "postgres") {
		t.Fatalf("spec not rewritten:\n%s", spec)
	}
	specPath := writeSpec(t, dir, "jobs/recs.yaml", spec)
	for _, sub := range []string{"models", "data"} {
		if err := symlink(filepath.Join(fixtures, sub), filepath.Join(dir, "jobs", sub)); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"TEST_REDIS_ADDR=" + rd.Addr, "TEST_REDIS_PW=" + pw, "TEST_NS=" + ns, "PRECOG_API_TOKENS=tok"}
	surfaces := map[string]string{}
	run := precogEnv(t, dir, env, "run", specPath, "--param", "date=2026-11-01")
	if run.code != 0 {
		t.Fatalf("run: %d %s", run.code, run.stderr)
	}
	surfaces["run output"] = run.stdout + run.stderr

	addr := freeAddr(t)
	serveLog := startPrecogCollecting(t, dir, "serve", "--jobs", "jobs", "--addr", addr)
	base := "http://" + addr
	call := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	key := testgen.KeyString(70)
	feats := make([]string, 16)
	for i := range feats {
		feats[i] = "0.5"
	}
	predict := `{"key":"` + key + `","inputs":{"features":[` + strings.Join(feats, ",") + `]}}`
	keyPath := "/v1/predictions/" + ns + "/" + url.PathEscape(key)
	// serve reaches Redis through the URL with its password (before, it
	// took the URL for host:port: "too many colons in address").
	waitForSecretsTest(t, 60*time.Second, "serve to answer a key from Redis", func() bool {
		code, body := call("GET", keyPath, "")
		return code == 200 && strings.Contains(body, `"redis"`)
	})
	record := func(when string) {
		for _, c := range []struct{ name, method, path, body string }{
			{"GET", "GET", keyPath, ""},
			{"batchGet", "POST", "/v1/predictions/" + ns + ":batchGet", `{"keys":["` + key + `","nope"]}`},
			{"predict", "POST", "/v1/predictions/" + ns + ":predict", predict},
			{"readyz", "GET", "/readyz", ""},
			{"metrics", "GET", "/metrics", ""},
		} {
			code, body := call(c.method, c.path, c.body)
			surfaces[fmt.Sprintf("%s %s (%d)", when, c.name, code)] = body
		}
	}
	record("up")

	rd.Stop()
	waitForSecretsTest(t, 60*time.Second, "GET to fail with Redis stopped", func() bool {
		code, _ := call("GET", keyPath, "")
		return code >= 500
	})
	waitForSecretsTest(t, 60*time.Second, "/readyz to report Redis", func() bool {
		code, body := call("GET", "/readyz", "")
		return code != 200 && strings.Contains(body, "redis")
	})
	started := time.Now()
	waitForSecretsTest(t, 60*time.Second, "go-redis's dial failure through slog", func() bool {
		call("GET", keyPath, "")
		return strings.Contains(serveLog.String(), "component=go-redis")
	})
	record("down")
	for name, body := range surfaces {
		if strings.HasPrefix(name, "down GET") && !strings.Contains(body, rd.Addr) {
			t.Errorf("%s should name the server %s: %s", name, rd.Addr, body)
		}
	}

	// The dashboard's pages and the CLI's views of the run.
	dashAddr := freeAddr(t)
	dashLog := startPrecogCollecting(t, dir, "dashboard", "--addr", dashAddr, "--jobs", "jobs")
	dash := func(path string) string {
		req, _ := http.NewRequest("GET", "http://"+dashAddr+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	rs := precog(t, dir, "runs", "--json")
	m := regexp.MustCompile(`"id":\s*"([^"]+)"`).FindStringSubmatch(rs.stdout)
	if rs.code != 0 || m == nil {
		t.Fatalf("runs --json: %d %s %s", rs.code, rs.stdout, rs.stderr)
	}
	runID := m[1]
	surfaces["runs --json"] = rs.stdout + rs.stderr
	waitForSecretsTest(t, 30*time.Second, "the dashboard to show the run", func() bool {
		return strings.Contains(dash("/runs/"+runID), runID)
	})
	for _, p := range []string{"/", "/jobs", "/runs/" + runID, "/runs/" + runID + "?part=live", "/api/runs/" + runID} {
		surfaces["dashboard "+p] = dash(p)
	}
	if !strings.Contains(surfaces["dashboard /runs/"+runID], "TEST_REDIS_PW") {
		t.Errorf("the run page should show the spec with its ${…}:\n%s", surfaces["dashboard /runs/"+runID])
	}
	st := precog(t, dir, "status", runID)
	surfaces["status"] = st.stdout + st.stderr
	rs = precog(t, dir, "runs")
	surfaces["runs"] = rs.stdout + rs.stderr

	surfaces["serve log"] = serveLog.String()
	surfaces["dashboard log"] = dashLog.String()
	for name, text := range surfaces {
		if strings.Contains(text, pw) {
			t.Errorf("%s shows the planted password:\n%s", name, text)
		}
	}
	// go-redis writes through slog, once per burst of each kind.
	logText := serveLog.String()
	if strings.Contains(logText, "pool.go:") {
		t.Errorf("raw go-redis lines in serve's log:\n%s", logText)
	}
	dials := strings.Count(logText, "failed to dial")
	if limit := 1 + int(time.Since(started)/time.Minute); dials > limit {
		t.Errorf("%d go-redis dial-failure lines in %s, want at most %d (once per burst):\n%s", dials, time.Since(started), limit, logText)
	}
}
