package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/runview"
)

const token = "s3cret-token"

func newServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	if o.Tokens == nil && !o.InsecureNoAuth {
		o.Tokens = []string{token}
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

// get fetches path with the bearer token (when tok != "") and no redirects.
func get(t *testing.T, ts *httptest.Server, path, tok string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.URL+path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestPages(t *testing.T) {
	for name, open := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			led, src := open(t)
			s := seed(t, led)
			ts := newServer(t, Options{Source: src, Actions: ledgerActions(led)})

			code, body, _ := get(t, ts, "/", token)
			if code != 200 {
				t.Fatalf("GET / = %d\n%s", code, body)
			}
			for _, id := range []string{s.Pending, s.Running, s.Succeeded, s.Failed, s.Cancelled} {
				if !strings.Contains(body, `data-run="`+id+`"`) {
					t.Errorf("runs page lacks run %s", id)
				}
			}
			for _, st := range []jobs.RunState{jobs.RunPending, jobs.RunRunning, jobs.RunSucceeded, jobs.RunFailed, jobs.RunCancelled} {
				if !strings.Contains(body, `">`+string(st)+`</span>`) {
					t.Errorf("runs page lacks the state %q in text", st)
				}
			}
			// The running run: 1000 of 3000 rows, as runview (precog status) says.
			if !regexp.MustCompile(`(?s)data-run="` + s.Running + `".*?33\.3%.*?1000 / 3000`).MatchString(body) {
				t.Errorf("running run's progress not 33.3%%, 1000 / 3000:\n%s", body)
			}

			_, body, _ = get(t, ts, "/?state=failed", token)
			if !strings.Contains(body, s.Failed) || strings.Contains(body, s.Succeeded) || strings.Contains(body, s.Running) {
				t.Errorf("state filter: want only %s", s.Failed)
			}
			_, body, _ = get(t, ts, "/?part=rows&job=scores", token)
			if !strings.Contains(body, s.Succeeded) || strings.Contains(body, s.Running) || strings.Contains(body, "<html") {
				t.Errorf("job filter fragment: want only scores rows, no layout:\n%s", body)
			}

			code, body, _ = get(t, ts, "/runs/"+s.Running, token)
			if code != 200 {
				t.Fatalf("run page = %d", code)
			}
			if n := strings.Count(body, `data-shard="`); n != 3 {
				t.Errorf("run page has %d data-shard elements, want 3", n)
			}
			for _, want := range []string{`data-bar-shard="0"`, "w-a", "w-b", "${REDIS_ADDR}", `<button type="submit" class="danger">Cancel</button>`, "<svg class=\"timeline\"", "<svg class=\"through\""} {
				if !strings.Contains(body, want) {
					t.Errorf("running run page lacks %q", want)
				}
			}
			if strings.Contains(body, "Retry failed shards") {
				t.Error("run without failed shards offers Retry")
			}
			_, body, _ = get(t, ts, "/runs/"+s.Failed, token)
			for _, want := range []string{"boom: bad row in part-1.parquet", "Retry failed shards", "Run error: 1 shard failed"} {
				if !strings.Contains(body, want) {
					t.Errorf("failed run page lacks %q", want)
				}
			}
			if strings.Contains(body, ">Cancel</button>") {
				t.Error("a failed run offers Cancel")
			}
			// The succeeded run's reject sample, escaped; none on a run
			// without rejects.
			_, body, _ = get(t, ts, "/runs/"+s.Succeeded, token)
			for _, want := range []string{"Rejected rows", "2 rows rejected", "<td>#1</td><td>data/part-1.parquet row 7</td><td class=\"err\">non-finite output score (NaN)</td><td><code>&lt;img src=x&gt;</code></td>",
				"data/part-1.parquet row 9", `href="/runs/` + s.Succeeded + `/rejects"`} {
				if !strings.Contains(body, want) {
					t.Errorf("succeeded run page lacks %q", want)
				}
			}
			if strings.Contains(body, "<img src=x>") {
				t.Error("run page does not escape a rejected key")
			}
			if _, body, _ = get(t, ts, "/runs/"+s.Running, token); strings.Contains(body, "Rejected rows") {
				t.Error("run page of a run without rejects shows a rejects section")
			}
			if code, _, _ := get(t, ts, "/runs/nope-1", token); code != 404 {
				t.Errorf("unknown run = %d, want 404", code)
			}

			// The JSON view is runview's, as precog status --json prints it.
			code, body, _ = get(t, ts, "/api/runs/"+s.Running, token)
			var got struct {
				Run    runview.Run  `json:"run"`
				Shards []jobs.Shard `json:"shards"`
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil || code != 200 {
				t.Fatalf("api run: %d %v\n%s", code, err, body)
			}
			run, _ := led.Run(context.Background(), s.Running)
			shards, _ := led.Shards(context.Background(), s.Running)
			want := runview.From(run, shards)
			if got.Run.RowsDone != want.RowsDone || got.Run.RowsTotal != want.RowsTotal || got.Run.Shards != want.Shards || got.Run.State != want.State || len(got.Shards) != 3 {
				t.Errorf("api run = %+v, want %+v", got.Run, want)
			}
			_, body, _ = get(t, ts, "/api/runs/"+s.Succeeded, token)
			var withRejects struct {
				Rejects []jobs.Reject `json:"reject_sample"`
			}
			if err := json.Unmarshal([]byte(body), &withRejects); err != nil || len(withRejects.Rejects) != 2 ||
				withRejects.Rejects[0] != (jobs.Reject{Shard: 1, Key: "<img src=x>", Position: "data/part-1.parquet row 7", Reason: "non-finite output score (NaN)"}) {
				t.Errorf("api run reject_sample = %+v (%v)\n%s", withRejects.Rejects, err, body)
			}
		})
	}
}

func TestJobsPage(t *testing.T) {
	dir := t.TempDir()
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seed(t, l)
	jobsDir := filepath.Join(dir, "jobs")
	os.MkdirAll(jobsDir, 0o755)
	spec := "name: scores\nschedule: \"30 2 * * *\"\ntimezone: Europe/Paris\nmax_staleness: 1h\nsource:\n  parquet: { path: data/x.parquet }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { y: y }\nsinks:\n  parquet: { path: out }\n"
	if err := os.WriteFile(filepath.Join(jobsDir, "scores.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	// Three hours from now, the newest success (seconds old) is stale.
	now := time.Now().Add(3 * time.Hour)
	ts := newServer(t, Options{Source: Shared{L: l}, JobsDir: jobsDir, Now: func() time.Time { return now }})
	code, body, _ := get(t, ts, "/jobs", token)
	if code != 200 {
		t.Fatalf("jobs = %d\n%s", code, body)
	}
	// 02:30 in Paris is 01:30 or 00:30 UTC (summer time).
	if n := len(regexp.MustCompile(`datetime="[0-9-]+T0[01]:30:00Z"`).FindAllString(body, -1)); n != nextFires {
		t.Errorf("jobs page lists %d fire times at 02:30 Paris, want %d", n, nextFires)
	}
	for _, want := range []string{"every day at 02:30", "30 2 * * *", "Europe/Paris",
		"stale: 3h0m0s old", "(1h0m0s)", `<svg class="spark"`, ">failed</span>"} {
		if !strings.Contains(body, want) {
			t.Errorf("jobs page lacks %q:\n%s", want, body)
		}
	}
	ts2 := newServer(t, Options{Source: Shared{L: l}})
	if _, body, _ := get(t, ts2, "/jobs", token); !strings.Contains(body, "--jobs DIR") {
		t.Error("jobs page without --jobs does not say how to get one")
	}
}

func TestDescribeCron(t *testing.T) {
	for expr, want := range map[string]string{
		"*/15 * * * *": "every 15 minutes", "0 */4 * * *": "every 4 hours at :00", "5 * * * *": "every hour at :05",
		"30 2 * * *": "every day at 02:30", "0 9 * * 1": "every Monday at 09:00", "0 9 * * 1-5": "weekdays at 09:00",
		"0 3 1 * *": "on day 1 of every month at 03:00", "@daily": "every day at midnight", "0 9 1 1 *": "cron 0 9 1 1 *",
	} {
		if got := describeCron(expr); got != want {
			t.Errorf("describeCron(%q) = %q, want %q", expr, got, want)
		}
	}
}

func TestAuth(t *testing.T) {
	dir := t.TempDir()
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := seed(t, l)
	if _, err := New(Options{Source: Shared{L: l}}); !errors.Is(err, ErrNoTokens) {
		t.Errorf("New without tokens = %v, want ErrNoTokens", err)
	}
	ts := newServer(t, Options{Source: Shared{L: l}, Actions: ledgerActions(l)})

	for _, p := range []string{"/", "/runs/" + s.Running, "/jobs"} {
		code, body, h := get(t, ts, p, "")
		if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login?next=") || strings.Contains(body, s.Failed) {
			t.Errorf("GET %s without a token = %d %q, want a redirect to the login and no run data", p, code, h.Get("Location"))
		}
	}
	for _, p := range []string{"/api/runs", "/api/runs/" + s.Running, "/?part=rows"} {
		code, body, _ := get(t, ts, p, "wrong")
		if code != 401 || strings.Contains(body, s.Running) {
			t.Errorf("GET %s with a wrong token = %d, want 401 and no run data", p, code)
		}
	}
	if code, _, _ := get(t, ts, "/api/runs", ""); code != 401 {
		t.Errorf("api without a token = %d, want 401", code)
	}
	if code, body, _ := get(t, ts, "/static/app.js", ""); code != 200 || !strings.Contains(body, "localTimes") {
		t.Errorf("static script = %d", code)
	}

	// Login: a wrong token is refused and sets no cookie; the right one sets
	// an HttpOnly SameSite=Strict session cookie that opens the pages.
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(ts.URL+"/login", url.Values{"token": {"nope"}, "next": {"/runs/" + s.Running}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Errorf("wrong-token login = %d with %d cookies, want 401 and none", resp.StatusCode, len(resp.Cookies()))
	}
	nc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = nc.PostForm(ts.URL+"/login", url.Values{"token": {token}, "next": {"/runs/" + s.Running}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runs/"+s.Running {
		t.Fatalf("login = %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := resp.Header.Get("Set-Cookie")
	if !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
		t.Errorf("session cookie %q is not HttpOnly SameSite=Strict", sc)
	}
	resp, err = c.Get(ts.URL + "/runs/" + s.Running)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(string(b))
	if resp.StatusCode != 200 || csrf == nil {
		t.Fatalf("run page with the session = %d, csrf %v", resp.StatusCode, csrf)
	}
	// An open redirect is refused.
	if got := safeNext("//evil.example/x"); got != "/" {
		t.Errorf("safeNext(//evil) = %q", got)
	}

	// Actions need the CSRF token with a cookie session.
	post := func(path string, form url.Values) int {
		resp, err := nc.PostForm(ts.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/runs/"+s.Running+"/cancel", url.Values{}); code != 403 {
		t.Errorf("cancel without CSRF = %d, want 403", code)
	}
	if code := post("/runs/"+s.Running+"/cancel", url.Values{"csrf": {"00" + csrf[1][2:]}}); code != 403 {
		t.Errorf("cancel with a wrong CSRF = %d, want 403", code)
	}
	if r, _ := l.Run(context.Background(), s.Running); r.State != jobs.RunRunning {
		t.Fatalf("refused cancels changed the run: %s", r.State)
	}
	if code := post("/runs/"+s.Running+"/cancel", url.Values{"csrf": {csrf[1]}}); code != http.StatusSeeOther {
		t.Errorf("cancel with CSRF = %d, want 303", code)
	}
	if r, _ := l.Run(context.Background(), s.Running); r.State != jobs.RunCancelled {
		t.Errorf("after Cancel the run is %s", r.State)
	}
	// A refusal shows the reason with 409; a request without a token is 401.
	if code := post("/runs/"+s.Succeeded+"/cancel", url.Values{"csrf": {csrf[1]}}); code != 409 {
		t.Errorf("cancel of a succeeded run = %d, want 409", code)
	}
	// A run that does not exist is 404, as a backfill's is (it was 409).
	if code := post("/runs/no-such-run/cancel", url.Values{"csrf": {csrf[1]}}); code != http.StatusNotFound {
		t.Errorf("cancel of a run that does not exist = %d, want 404", code)
	}
	if resp, err := http.PostForm(ts.URL+"/runs/"+s.Pending+"/cancel", url.Values{"csrf": {csrf[1]}}); err != nil || resp.StatusCode != 401 {
		t.Errorf("cancel without a session = %v %v, want 401", resp.StatusCode, err)
	}

	// Scripts: a bearer token needs no CSRF.
	req, _ := http.NewRequest("POST", ts.URL+"/runs/"+s.Failed+"/retry", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = nc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "note=1+failed") {
		t.Errorf("bearer retry = %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if sh, _ := l.Shards(context.Background(), s.Failed); sh[1].State != jobs.ShardPending && sh[0].State != jobs.ShardPending {
		t.Errorf("retry left the failed shard: %+v", sh)
	}

	// Log out ends the session.
	if code := post("/logout", nil); code != http.StatusSeeOther {
		t.Errorf("logout = %d", code)
	}
	resp, _ = nc.Get(ts.URL + "/")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after logout / = %d, want a redirect", resp.StatusCode)
	}
}

func TestInsecureBanner(t *testing.T) {
	dir := t.TempDir()
	ts := newServer(t, Options{Source: BoltDir{StateDir: dir}, InsecureNoAuth: true})
	code, body, _ := get(t, ts, "/", "")
	if code != 200 || !strings.Contains(body, "Authentication is off") {
		t.Errorf("insecure / = %d, banner missing", code)
	}
}

// TestBusyShowsSnapshot: while another process holds the embedded ledger,
// the busy page lists the runs of that process's snapshot (a local
// backfill writes one), saying whose it is and how old; without a
// snapshot it is the plain busy page.
func TestBusyShowsSnapshot(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	snap := BusySnapshot{PID: 4242, WrittenAt: now.Add(-1500 * time.Millisecond), Runs: []runview.Run{
		{ID: "daily-20261126t055900-ab12", Job: "daily", State: "running", RowsDone: 300, RowsTotal: 800, Backfill: "bf-7"},
		{ID: "daily-20261126t055800-cd34", Job: "daily", State: "succeeded", RowsDone: 800, RowsTotal: 800, Backfill: "bf-7"},
	}}
	have := true
	ts := newServer(t, Options{Source: BoltDir{StateDir: dir}, Now: func() time.Time { return now },
		BusySnapshot: func() (BusySnapshot, bool) { return snap, have }})
	held := holdLedgerFile(t, dir)
	defer held.Close()
	code, body, _ := get(t, ts, "/", token)
	if code != 503 || !strings.Contains(body, "The ledger is busy") || !strings.Contains(body, "process 4242") ||
		!strings.Contains(body, "1.5s ago") || !strings.Contains(body, `data-run="daily-20261126t055900-ab12"`) ||
		!strings.Contains(body, "300 of 800") || !strings.Contains(body, "bf-7") {
		t.Errorf("busy page with a snapshot: %d\n%s", code, body)
	}
	if code, body, _ := get(t, ts, "/api/runs", token); code != 503 || strings.Contains(body, "daily-") {
		t.Errorf("the API while busy: %d %s (a snapshot is for people, not the contract's JSON)", code, body)
	}
	have = false
	if code, body, _ := get(t, ts, "/", token); code != 503 || strings.Contains(body, "data-snapshot") {
		t.Errorf("busy page without a snapshot: %d\n%s", code, body)
	}
}

// holdLedgerFile holds the embedded ledger's file as a process frozen
// inside a transaction would (or an older precog, which held it for its
// whole run): a raw bbolt open keeps the file's lock until Close.
func holdLedgerFile(t *testing.T, dir string) *bbolt.DB {
	t.Helper()
	held, err := bbolt.Open(filepath.Join(dir, bolt.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// TestBoltBusy: the embedded ledger held by a run makes pages say so (503)
// instead of hanging or failing obscurely; once released they read it.
func TestBoltBusy(t *testing.T) {
	dir := t.TempDir()
	ts := newServer(t, Options{Source: BoltDir{StateDir: dir}})
	l, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := mustCreate(t, l, "recs", 1)
	l.Close()
	held := holdLedgerFile(t, dir)
	code, body, _ := get(t, ts, "/", token)
	if code != 503 || !strings.Contains(body, "The ledger is busy") || !strings.Contains(body, "data-refresh") {
		t.Errorf("busy ledger: %d\n%s", code, body)
	}
	if !errors.Is(ledger.ErrBusy, ledger.ErrBusy) {
		t.Fatal()
	}
	held.Close()
	code, body, _ = get(t, ts, "/", token)
	if code != 200 || !strings.Contains(body, r.ID) {
		t.Errorf("released ledger: %d, run %s missing", code, r.ID)
	}
}

// TestRunStateFilter: the runs page's state filter offers every state a
// run's view shows, held and interrupted included (they come from
// jobs.RunStates through runview, not a list of the page's own), and
// each filters to its runs: on the embedded ledger a running run whose
// process is gone shows interrupted.
func TestRunStateFilter(t *testing.T) {
	dir := t.TempDir()
	led, err := bolt.OpenIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	s := seed(t, led)
	held := mustCreate(t, led, "recs", 1).ID
	if err := led.Hold(context.Background(), held, "check failed"); err != nil {
		t.Fatal(err)
	}
	gone := mustCreate(t, led, "recs", 1).ID
	setState(t, led, gone, jobs.RunRunning, "") // no holder, no lease: its process is gone
	ts := newServer(t, Options{Source: Shared{L: led, Name: "test bolt"}, StateDir: dir})

	_, body, _ := get(t, ts, "/", token)
	for _, st := range []string{"pending", "running", "held", "succeeded", "failed", "cancelled", "interrupted"} {
		if !strings.Contains(body, `<option value="`+st+`">`+st+`</option>`) {
			t.Errorf("the state filter lacks %q", st)
		}
	}
	for st, want := range map[string]string{"held": held, "interrupted": gone, "failed": s.Failed} {
		_, body, _ := get(t, ts, "/?part=rows&state="+st, token)
		if n := strings.Count(body, `data-run="`); n != 1 || !strings.Contains(body, `data-run="`+want+`"`) {
			t.Errorf("state=%s: %d rows, want only run %s:\n%s", st, n, want, body)
		}
	}
}

// TestBoltDirWithoutLedger: the dashboard over a state dir where nothing
// ran shows no runs and is ready, and leaves no ledger behind (it used to
// create one at the first page).
func TestBoltDirWithoutLedger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ts := newServer(t, Options{Source: BoltDir{StateDir: dir}, StateDir: dir, InsecureNoAuth: true})
	if code, body, _ := get(t, ts, "/", ""); code != 200 || !strings.Contains(body, "No runs") {
		t.Errorf("/ of a state dir without a ledger = %d, want 200 saying no runs:\n%s", code, body)
	}
	if code, _, _ := get(t, ts, "/readyz", ""); code != 200 {
		t.Errorf("/readyz of a state dir without a ledger = %d, want 200", code)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dashboard created %s: %v", dir, err)
	}
}

// TestRunPageStagedData: the run page of a failed cluster run says what
// precog status says of its staged data: kept until when (precog retry
// resumes the run) or removed (a retry recomputes); the live part too, and
// the JSON view has staged_kept_until / staged_removed. A run of the
// embedded ledger, which keeps no staged data of a failed run, and a
// succeeded run show no such line.
func TestRunPageStagedData(t *testing.T) {
	for name, open := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			led, src := open(t)
			s := seed(t, led)
			kept := mustCreate(t, led, "scores", 2).ID
			commit(t, led, kept, "w-a", 1000)
			setState(t, led, kept, jobs.RunFailed, "1 shard out of attempts")
			err := led.AddCleanup(ctx, ledger.CleanupParams{RunID: kept, Reason: "failed; staged data kept for retry.keep_failed 1h", DueIn: time.Hour})
			cluster := !errors.Is(err, ledger.ErrUnsupported)
			if cluster && err != nil {
				t.Fatal(err)
			}
			ts := newServer(t, Options{Source: src, Actions: ledgerActions(led)})
			lines := map[string]string{kept: "", s.Failed: "", s.Succeeded: ""}
			var until string
			if cluster {
				c, err := led.PendingCleanup(ctx, kept)
				if err != nil {
					t.Fatal(err)
				}
				until = c.DueAt.UTC().Format(time.RFC3339)
				lines[kept] = `<p class="note" data-staged>Retry: staged data kept until ` + until + `; precog retry ` + kept + ` resumes the run (committed shards are not recomputed)</p>`
				lines[s.Failed] = `<p class="note" data-staged>Retry: staged data removed; precog retry ` + s.Failed + ` recomputes the shards its sinks lost</p>`
			}
			for id, want := range lines {
				for _, path := range []string{"/runs/" + id, "/runs/" + id + "?part=live"} {
					code, body, _ := get(t, ts, path, token)
					if code != 200 {
						t.Fatalf("GET %s = %d", path, code)
					}
					if n := strings.Count(body, "data-staged"); want == "" && n != 0 || want != "" && (n != 1 || !strings.Contains(body, want)) {
						t.Errorf("GET %s: %d staged-data lines; want %q\n%s", path, n, want, body)
					}
				}
			}
			_, body, _ := get(t, ts, "/api/runs/"+kept, token)
			var got struct {
				Run runview.Run `json:"run"`
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil || got.Run.StagedKeptUntil != until || got.Run.StagedRemoved {
				t.Errorf("api run of the kept run: %+v (%v); want staged_kept_until %q", got.Run, err, until)
			}
			_, body, _ = get(t, ts, "/api/runs/"+s.Failed, token)
			got.Run = runview.Run{}
			if err := json.Unmarshal([]byte(body), &got); err != nil || got.Run.StagedRemoved != cluster || got.Run.StagedKeptUntil != "" {
				t.Errorf("api run of the failed run: %+v (%v); want staged_removed %v", got.Run, err, cluster)
			}
		})
	}
}
