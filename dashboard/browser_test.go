package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// chromiumPath is Debian's chromium, which playwright-core drives (it
// downloads no browser itself).
const chromiumPath = "/usr/bin/chromium"

// browserTools finds node, chromium and playwright-core. Without them the
// test skips, except under CI=true, where a missing tool is a failure
// (make servers installs them: scripts/install-servers.sh).
func browserTools(t *testing.T) (node, dir string) {
	t.Helper()
	dir, _ = filepath.Abs("browser")
	var missing []string
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	chromium := envOrDefault("PRECOG_CHROMIUM", chromiumPath)
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "playwright-core in "+filepath.Join(dir, "node_modules"))
	}
	if len(missing) > 0 {
		msg := "browser test needs " + strings.Join(missing, ", ") + " (install with: make servers, or bash scripts/install-servers.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, dir
}

func envOrDefault(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// artifactsDir is where screenshots go: PRECOG_ARTIFACTS, else the
// gitignored browser/artifacts.
func artifactsDir(t *testing.T, dir string) string {
	art := envOrDefault("PRECOG_ARTIFACTS", filepath.Join(dir, "artifacts"))
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	return art
}

// TestBrowser drives the pages in headless Chromium over the Postgres
// ledger while this test advances a running run (the runs, a run, the
// jobs and a backfill's page: a cell per date in its run's state, linked
// to the run), then checks that the Cancel button cancelled the run in
// the ledger. Any console error fails it.
func TestBrowser(t *testing.T) {
	node, dir := browserTools(t)
	led, src := ledgers(t)["postgres"](t)
	finished := mustCreate(t, led, "scores", 2).ID
	commit(t, led, finished, "w-a", 1000)
	commit(t, led, finished, "w-b", 1000)
	setState(t, led, finished, jobs.RunSucceeded, "")
	const shards = 12
	running := mustCreate(t, led, "recs", shards).ID
	commit(t, led, running, "w-a", 1000)
	toCancel := mustCreate(t, led, "recs", 3).ID
	commit(t, led, toCancel, "w-a", 1000)

	bf := seedBackfill(t, led)

	// The running run advances by one shard each time the runs page polls
	// its rows, so it moves while the browser watches however long Chromium
	// takes to start and log in on a loaded machine (a clock-driven advance
	// was over before a slow browser first looked).
	srv, err := New(Options{Source: src, Actions: ledgerActions(led), JobsDir: writeJobsDir(t), Poll: 700 * time.Millisecond, Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	adv := &advancer{t: t, led: led, run: running, left: shards - 2}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.Query().Get("part") == "rows" {
			adv.step(context.WithoutCancel(r.Context()))
		}
		srv.ServeHTTP(w, r)
	}))
	defer ts.Close()

	art := artifactsDir(t, dir)
	cctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, node, "dashboard.spec.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BASE_URL="+ts.URL, "TOKEN="+token, "RUNNING="+running, "FINISHED="+finished,
		"CANCEL_RUN="+toCancel, fmt.Sprintf("SHARDS=%d", shards),
		"BACKFILL="+bf.ID, "BACKFILL_DATES=2026-11-01,2026-11-02,2026-11-03", "BACKFILL_STATES=succeeded,failed,pending", "BACKFILL_RUN="+bf.Succeeded, "ART_DIR="+art, "CHROMIUM="+envOrDefault("PRECOG_CHROMIUM", chromiumPath))
	out, err := cmd.Output()
	var res struct {
		OK     bool     `json:"ok"`
		Error  string   `json:"error"`
		Steps  []string `json:"steps"`
		Errors []string `json:"errors"`
	}
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	if jerr := json.Unmarshal([]byte(last), &res); jerr != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("browser script: %v; output:\n%s\n%s", err, out, stderr)
	}
	for _, s := range res.Steps {
		t.Log(s)
	}
	if err != nil || !res.OK {
		t.Fatalf("browser script failed: %v: %s\nconsole errors: %v", err, res.Error, res.Errors)
	}
	r, err := led.Run(context.Background(), toCancel)
	if err != nil || r.State != jobs.RunCancelled {
		t.Errorf("after clicking Cancel, run %s is %s (%v), want cancelled", toCancel, r.State, err)
	}
	for _, f := range []string{"runs.png", "runs-phone.png", "run.png", "jobs.png", "run-cancelled.png", "backfill.png"} {
		if st, err := os.Stat(filepath.Join(art, f)); err != nil || st.Size() == 0 {
			t.Errorf("screenshot %s missing: %v", f, err)
		}
	}
	t.Logf("screenshots in %s", art)
}

// advancer commits the shards of a run one at a time, at most left.
type advancer struct {
	t    *testing.T
	led  ledger.Store
	run  string
	mu   sync.Mutex
	left int
	i    int
}

// step commits the next shard, alternating workers; nothing once left is spent.
func (a *advancer) step(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.left <= 0 {
		return
	}
	a.left--
	w := fmt.Sprintf("w-%c", 'a'+a.i%3)
	a.i++
	sh, err := a.led.Claim(ctx, a.run, w, lease)
	if err != nil {
		a.t.Errorf("advance: claim: %v", err)
		return
	}
	if err := a.led.Complete(ctx, ledger.CompleteParams{RunID: a.run, Shard: sh.Index, Worker: w, Counts: jobs.Counts{RowsIn: 1000, RowsOut: 990, Rejected: 10}}); err != nil {
		a.t.Errorf("advance: complete: %v", err)
	}
}

// writeJobsDir writes a scheduled job spec for the jobs page.
func writeJobsDir(t *testing.T) string {
	dir := t.TempDir()
	spec := "name: scores\nschedule: \"30 2 * * *\"\ntimezone: Europe/Paris\nmax_staleness: 1h\nsource:\n  parquet: { path: data/x.parquet }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { y: y }\nsinks:\n  parquet: { path: out }\n"
	if err := os.WriteFile(filepath.Join(dir, "scores.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
