package lookup

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
)

// roleWithoutSelect creates a login role that may connect to pg's database
// but read none of its tables, and returns its DSN.
func roleWithoutSelect(t testing.TB, pg *testservers.PG) string {
	t.Helper()
	role := "noread_" + pg.Database
	pg.Exec(t, `CREATE ROLE `+role+` LOGIN`)
	t.Cleanup(func() {
		p := pg.Pool(t)
		_, _ = p.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	u, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// closedPortDSN is pg's DSN on a port nothing listens on: a Postgres that
// is down.
func closedPortDSN(t testing.TB, pg *testservers.PG) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	u, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

func (e *env) metric(name string) string {
	e.t.Helper()
	_, body := e.do("GET", "/metrics", "", "")
	for _, line := range strings.Split(fmt.Sprint(body["raw"]), "\n") {
		if strings.HasPrefix(line, name) {
			return line
		}
	}
	return ""
}

// While Redis is down, requests skip it (circuit open) and are answered
// from Postgres at once instead of each waiting out a dial; a batchGet
// answers every key on its own; after Redis restarts, a probe closes the
// breaker and Redis answers again.
func TestBreakerSkipsRedisWhileDown(t *testing.T) {
	t.Parallel()
	// The step timeout is long next to any request on a loaded machine, so
	// "requests do not wait for Redis" (p50 under a tenth of it) says
	// nothing about the machine's speed.
	const step = 2 * time.Second
	e := newEnv(t, envOpts{privateRedis: true, mutate: func(c *Config) { c.VersionPoll = 50 * time.Millisecond; c.StoreTimeout = step }})
	rec := `{"score":0.75,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`
	e.publishRedis("r1", map[string]string{"user-1": rec})
	e.pg.Exec(t, `INSERT INTO user_scores_run1 VALUES ('user-1', 0.75, 'v-model', '2026-01-01T00:00:00Z')`)
	waitUntil(t, "redis source", func() bool { _, b := e.get("user-1"); return b["source"] == "redis" })
	gauge := `precog_lookup_store_circuit_open{store="redis",target="` + e.redis.Addr + `"}`
	if m := e.metric(gauge); m != gauge+" 0" {
		t.Errorf("breaker gauge with Redis up: %q", m)
	}

	e.redis.Stop()
	var took []time.Duration
	for range 40 {
		start := time.Now()
		code, body := e.get("user-1")
		took = append(took, time.Since(start))
		if code != 200 || body["source"] != "postgres" {
			t.Fatalf("with Redis down: %d %v", code, body)
		}
	}
	slices.Sort(took)
	t.Logf("Redis down: p50 %v, p90 %v, max %v over %d GETs (step timeout %v)", took[len(took)/2], took[len(took)*9/10], took[len(took)-1], len(took), step)
	if p50 := took[len(took)/2]; p50 > step/10 {
		t.Fatalf("with Redis down, p50 %v (p90 %v): requests still wait for Redis (step timeout %v)", p50, took[len(took)*9/10], step)
	}
	if m := e.metric(gauge); m != gauge+" 1" {
		t.Errorf("breaker gauge with Redis down: %q", m)
	}

	// batchGet: user-1 answered by Postgres, "nobody" unavailable (Redis,
	// which may hold it, is down): 200, each key with its status.
	code, body := e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":["user-1","nobody"]}`, token)
	res, _ := body["results"].([]any)
	if code != 200 || len(res) != 2 {
		t.Fatalf("batchGet with Redis down: %d %v", code, body)
	}
	r0, r1 := res[0].(map[string]any), res[1].(map[string]any)
	if r0["status"] != "found" || r0["found"] != true || r0["source"] != "postgres" {
		t.Errorf("batchGet key 0: %v", r0)
	}
	if r1["status"] != "unavailable" || r1["found"] != false || !strings.Contains(fmt.Sprint(r1["error"]), "circuit open") {
		t.Errorf("batchGet key 1: %v", r1)
	}

	code, body = e.do("GET", "/readyz", "", "")
	if code != 200 || !strings.Contains(fmt.Sprint(body["failures"]), "circuit open") || body["checks"].(map[string]any)[e.ns+"/postgres"] != "ok" {
		t.Errorf("readyz with Redis down, Postgres up: %d %v", code, body)
	}

	e.redis.Start()
	e.publishRedis("r1", map[string]string{"user-1": rec})
	waitUntil(t, "back to redis", func() bool { _, b := e.get("user-1"); return b["source"] == "redis" })
	if m := e.metric(gauge); m != gauge+" 0" {
		t.Errorf("breaker gauge after Redis came back: %q", m)
	}
	code, body = e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":["user-1","nobody"]}`, token)
	if res, _ := body["results"].([]any); code != 200 || len(res) != 2 || res[1].(map[string]any)["status"] != "miss" {
		t.Errorf("batchGet with Redis back: %d %v", code, body)
	}
}

// /readyz names each store that fails or denies access, with the reason,
// and a Postgres role without SELECT is a permission error everywhere, not
// "no key column".
func TestReadyReportsDeniedPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, pgNoSelect: true})
	e.publishRedis("r1", map[string]string{})
	waitUntil(t, "published", func() bool { v, _ := e.srv.ns[e.ns].redis.version(); return v == "r1" })

	code, body := e.do("GET", "/readyz", "", "")
	if code != 503 || !strings.Contains(fmt.Sprint(body["failures"]), "permission denied for view user_scores") ||
		!strings.HasPrefix(fmt.Sprint(body["checks"].(map[string]any)[e.ns+"/postgres"]), "error:") {
		t.Fatalf("readyz with Postgres denied: %d %v", code, body)
	}
	// A request that falls through to Postgres says why it failed.
	code, body = e.get("user-1")
	if msg := fmt.Sprint(body["error"]); code != 503 || !strings.Contains(msg, "permission denied for view user_scores") || strings.Contains(msg, "no key column") {
		t.Errorf("GET through a denied Postgres: %d %v", code, body)
	}

	e.redis.Stop()
	code, body = e.do("GET", "/readyz", "", "")
	fails, _ := body["failures"].([]any)
	var stores []string
	for _, f := range fails {
		stores = append(stores, fmt.Sprint(f.(map[string]any)["store"]))
	}
	if code != 503 || len(fails) != 2 || !slices.Contains(stores, "redis") || !slices.Contains(stores, "postgres") {
		t.Fatalf("readyz with both stores failing: %d %v", code, body)
	}
}

// With every store of a namespace down, /readyz is 503 and names each one,
// although the live model is loaded: it answers only keys whose features
// are at hand, not the precomputed ones.
func TestReadyBothStoresDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, pgDown: true})
	e.redis.Stop()
	code, body := e.do("GET", "/readyz", "", "")
	fails, _ := body["failures"].([]any)
	var stores []string
	for _, f := range fails {
		stores = append(stores, fmt.Sprint(f.(map[string]any)["store"]))
	}
	if code != 503 || len(fails) != 2 || !slices.Contains(stores, "redis") || !slices.Contains(stores, "postgres") ||
		!strings.Contains(fmt.Sprint(fails), "connection refused") {
		t.Fatalf("readyz with both stores down: %d %v", code, body)
	}
}

// A Redis that restarts without its data while a version is published is
// an outage of that store, not a miss of every key: reads answer 503 (or
// the next store), /readyz names it, a gauge says so, and the next publish
// brings the namespace back. Each step waits on the server's own state.
func TestEmptiedRedisIsUnavailableNotMiss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, noPostgres: true, mutate: func(c *Config) { c.VersionPoll = time.Hour }})
	rec := `{"score":0.75,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`
	e.publishRedis("r1", map[string]string{"user-1": rec})
	waitUntil(t, "redis source", func() bool { _, b := e.get("user-1"); return b["source"] == "redis" })
	gauge := `precog_lookup_redis_version_lost{namespace="` + e.ns + `"}`
	if m := e.metric(gauge); m != gauge+" 0" {
		t.Errorf("lost gauge while published: %q", m)
	}

	// Restarted empty. The poll is an hour away and no notice came: the
	// first miss itself re-reads {ns}:current and finds it gone.
	e.redis.Stop()
	e.redis.Start()
	waitUntil(t, "redis answering again", func() bool { return e.redis.Client(t).Ping(context.Background()).Err() == nil })
	code, body := e.get("user-1")
	if code != 503 || !strings.Contains(fmt.Sprint(body["error"]), "gone from Redis") {
		t.Fatalf("GET after Redis lost its data: %d %v (want 503, never a miss)", code, body)
	}
	code, body = e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":["user-1","nobody"]}`, token)
	res, _ := body["results"].([]any)
	if code != 503 || len(res) != 2 {
		t.Fatalf("batchGet after Redis lost its data: %d %v (want 503: no key could be answered)", code, body)
	}
	for i, r := range res {
		if st := r.(map[string]any)["status"]; st != "unavailable" {
			t.Errorf("batchGet key %d after Redis lost its data: %v, want unavailable", i, r)
		}
	}
	code, body = e.do("GET", "/readyz", "", "")
	if code != 503 || !strings.Contains(fmt.Sprint(body["failures"]), "gone from Redis") {
		t.Errorf("readyz after Redis lost its data: %d %v", code, body)
	}
	if m := e.metric(gauge); m != gauge+" 1" {
		t.Errorf("lost gauge after Redis lost its data: %q", m)
	}

	e.publishRedis("r1", map[string]string{"user-1": rec})
	waitUntil(t, "redis source after the republish", func() bool { _, b := e.get("user-1"); return b["source"] == "redis" })
	if m := e.metric(gauge); m != gauge+" 0" {
		t.Errorf("lost gauge after the republish: %q", m)
	}
	if code, body := e.get("nobody"); code != 404 {
		t.Errorf("a real miss after the republish: %d %v", code, body)
	}
}
