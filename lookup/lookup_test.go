package lookup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup/client"
	"github.com/precog-ml/precog/runner/model"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

func TestMain(m *testing.M) {
	if lib, err := testgen.ORTLibrary(); err == nil {
		os.Setenv("PRECOG_ORT_LIB", lib)
	}
	testservers.Main(m)
}

const token = "s3cret-token"

// env is one test's server over real Redis, Postgres and the ranker model.
type env struct {
	t     testing.TB
	srv   *Server
	http  *httptest.Server
	redis *testservers.RedisServer
	pg    *testservers.PG
	ns    string
	model *testgen.Model
}

type envOpts struct {
	privateRedis bool
	features     bool
	writeback    bool
	noPostgres   bool // no Postgres sink: Redis is the only store
	pgNoSelect   bool // the server reads Postgres as a role without SELECT
	hashVersion  bool // no model.version: the version is the model file's hash
	pgDown       bool // the server's Postgres DSN points at a closed port
	mutate       func(*Config)
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	if _, err := testgen.ORTLibrary(); err != nil {
		t.Fatal(err)
	}
	var rd *testservers.RedisServer
	if o.privateRedis {
		rd = testservers.NewRedis(t)
	} else {
		rd = testservers.Redis(t)
	}
	pg := testservers.Postgres(t)
	dir := t.TempDir()
	if _, err := testgen.Write(dir, "ranker"); err != nil {
		t.Fatal(err)
	}
	modelVersion := "\n  version: v-model"
	if o.hashVersion {
		modelVersion = ""
	}
	ns := "rank" + rd.Prefix
	cols := make([]string, 16)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
	}
	serving := ""
	if o.features {
		serving += fmt.Sprintf("  features: { dsn: %q, table: user_features }\n", pg.DSN)
	}
	if o.writeback {
		serving += "  writeback_ttl: 1m\n"
	}
	if serving != "" {
		serving = "serving:\n" + serving
	}
	pgDSN := pg.DSN
	if o.pgNoSelect {
		pgDSN = roleWithoutSelect(t, pg)
	}
	if o.pgDown {
		pgDSN = closedPortDSN(t, pg)
	}
	pgSink := fmt.Sprintf("  postgres: { dsn: %q, table: user_scores }\n", pgDSN)
	if o.noPostgres {
		pgSink = ""
	}
	yaml := fmt.Sprintf(`name: ranker-job
source:
  parquet: { path: data.parquet }
  key: user_id
model:
  path: ranker.onnx%s
  inputs:
    features: { columns: [%s] }
  outputs:
    score: score
sinks:
  redis: { addr: %q, db: %d, namespace: %s }
%s%s`, modelVersion, strings.Join(cols, ", "), rd.Addr, rd.DB, ns, pgSink, serving)
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Load(file, nil)
	if err != nil {
		t.Fatalf("spec: %v", err)
	}
	cfg := Config{
		Specs:        []*jobs.Spec{spec},
		Tokens:       []string{"other", token},
		StoreTimeout: 2 * time.Second, // generous: CI runs the race detector on 2 shared cores
		VersionPoll:  time.Hour,       // tests see pub/sub, not the poll
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if o.mutate != nil {
		o.mutate(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })

	pg.Exec(t, `CREATE TABLE user_scores_run1 (user_id text, score real, model_version text, computed_at timestamptz)`)
	pg.Exec(t, `CREATE VIEW user_scores AS SELECT * FROM user_scores_run1`)
	if o.features {
		var defs []string
		for _, c := range cols {
			defs = append(defs, c+" real")
		}
		pg.Exec(t, `CREATE TABLE user_features (user_id text PRIMARY KEY, `+strings.Join(defs, ", ")+`)`)
	}
	m, _ := testgen.Get("ranker")
	return &env{t: t, srv: srv, http: hs, redis: rd, pg: pg, ns: ns, model: m}
}

func features(key int64) []float32 { return testgen.Features(7, key, 16) }

func (e *env) addFeatures(key string, f []float32) {
	args := []any{key}
	ph := []string{"$1"}
	for i, v := range f {
		args = append(args, v)
		ph = append(ph, "$"+strconv.Itoa(i+2))
	}
	e.pg.Exec(e.t, `INSERT INTO user_features VALUES (`+strings.Join(ph, ",")+`)`, args...)
}

// layout is the sink's key layout of the test namespace.
func (e *env) layout() sinkredis.Layout { return sinkredis.Layout{Namespace: e.ns} }

func (e *env) publishRedis(version string, recs map[string]string) {
	c := e.redis.Client(e.t)
	ctx := context.Background()
	for k, v := range recs {
		if err := c.Set(ctx, e.layout().Record(version, k), v, 0).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := c.Set(ctx, e.layout().Current(), version, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := c.Publish(ctx, e.layout().Channel(), version).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) do(method, path, body string, tok string) (int, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.http.URL+path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m == nil {
		m = map[string]any{"raw": string(b)}
	}
	return resp.StatusCode, m
}

func (e *env) get(key string) (int, map[string]any) {
	return e.do("GET", "/v1/predictions/"+e.ns+"/"+key, "", token)
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// refScore is the pure-Go reference score of f, as float32.
func (e *env) refScore(f []float32) float32 {
	out, err := e.model.Reference(f, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	return out["score"].Float32[0]
}

func TestFallbackChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{features: true})
	e.publishRedis("r1", map[string]string{"user-1": `{"score":0.25,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`})
	e.pg.Exec(t, `INSERT INTO user_scores_run1 VALUES ('user-2', 0.5, 'v-model', '2026-01-02T00:00:00Z')`)
	f3 := features(3)
	e.addFeatures("user-3", f3)

	waitUntil(t, "published version", func() bool { v, ok := e.srv.ns[e.ns].redis.version(); return ok && v == "r1" })

	code, body := e.get("user-1")
	if code != 200 || body["source"] != "redis" || body["values"].(map[string]any)["score"] != 0.25 || body["model_version"] != "v-model" {
		t.Fatalf("redis hit: %d %v", code, body)
	}
	code, body = e.get("user-2")
	if code != 200 || body["source"] != "postgres" || body["values"].(map[string]any)["score"] != 0.5 || body["computed_at"] != "2026-01-02T00:00:00Z" {
		t.Fatalf("postgres hit: %d %v", code, body)
	}
	code, body = e.get("user-3")
	if code != 200 || body["source"] != "live" || body["model_version"] != "v-model" {
		t.Fatalf("live from features: %d %v", code, body)
	}
	got := body["values"].(map[string]any)["score"].(float64)
	if want := e.refScore(f3); math.Abs(got-float64(want)) > 1e-5 {
		t.Errorf("live score %v, reference %v", got, want)
	}
	code, body = e.get("user-4")
	if code != 404 || !strings.Contains(fmt.Sprint(body["error"]), `no prediction for key "user-4"`) {
		t.Fatalf("miss: %d %v", code, body)
	}

	code, body = e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":["user-1","user-4","user-2","user-3"]}`, token)
	if code != 200 {
		t.Fatalf("batchGet: %d %v", code, body)
	}
	res := body["results"].([]any)
	want := []struct {
		key, source string
		found       bool
	}{{"user-1", "redis", true}, {"user-4", "", false}, {"user-2", "postgres", true}, {"user-3", "live", true}}
	for i, w := range want {
		r := res[i].(map[string]any)
		if r["key"] != w.key || r["found"] != w.found || (w.found && r["source"] != w.source) {
			t.Errorf("batchGet result %d = %v, want %+v", i, r, w)
		}
	}
}

// Live predictions equal what the batch job's model code computes for the
// same row: the batch path is runner/model's Encode+Infer on source columns.
func TestPredictLiveEqualsBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	m, err := model.Load(e.srv.ns[e.ns].spec.Model, "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const n = 40
	// Batch: one record of n rows of float32 columns, as a Parquet source gives.
	fields := []arrow.Field{{Name: "user_id", Type: arrow.BinaryTypes.String}}
	for i := range 16 {
		fields = append(fields, arrow.Field{Name: testgen.FeatureColumn(i), Type: arrow.PrimitiveTypes.Float32})
	}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	for k := range n {
		bld.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("new-%d", k))
		for i, v := range features(int64(100 + k)) {
			bld.Field(i + 1).(*array.Float32Builder).Append(v)
		}
	}
	rec := bld.NewRecordBatch()
	defer rec.Release()
	b, err := m.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Infer(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	batchScores := out.Column(0).(*array.Float32)

	// Live: n concurrent predict calls, half by input name, half by column.
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := features(int64(100 + k))
			var body []byte
			if k%2 == 0 {
				body, _ = json.Marshal(map[string]any{"key": fmt.Sprintf("new-%d", k), "inputs": map[string]any{"features": f}})
			} else {
				cols := map[string]float32{}
				for i, v := range f {
					cols[testgen.FeatureColumn(i)] = v
				}
				body, _ = json.Marshal(map[string]any{"key": fmt.Sprintf("new-%d", k), "columns": cols})
			}
			code, resp := e.do("POST", "/v1/predictions/"+e.ns+":predict", string(body), token)
			if code != 200 || resp["source"] != "live" {
				t.Errorf("predict %d: %d %v", k, code, resp)
				return
			}
			got := float32(resp["values"].(map[string]any)["score"].(float64))
			if want := batchScores.Value(k); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("key %d: live %v != batch %v", k, got, want)
			}
			if ref := e.refScore(f); math.Abs(float64(got-ref)) > 1e-5 {
				t.Errorf("key %d: live %v, reference %v", k, got, ref)
			}
		}()
	}
	wg.Wait()
	// Concurrent misses were batched: fewer runs than requests.
	mf, _ := e.srv.metrics.reg.Gather()
	for _, f := range mf {
		if f.GetName() == "precog_lookup_live_batch_size" {
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleSum() != n {
				t.Errorf("live rows %v, want %d", h.GetSampleSum(), n)
			}
			t.Logf("%d predictions in %d inference runs", n, h.GetSampleCount())
		}
	}
}

func TestPredictReturnsStoredRecordFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.publishRedis("r1", map[string]string{"user-1": `{"score":0.25,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`})
	waitUntil(t, "published version", func() bool { _, ok := e.srv.ns[e.ns].redis.version(); return ok })
	in, _ := json.Marshal(map[string]any{"key": "user-1", "inputs": map[string]any{"features": features(1)}})
	code, body := e.do("POST", "/v1/predictions/"+e.ns+":predict", string(in), token)
	if code != 200 || body["source"] != "redis" {
		t.Fatalf("predict on a stored key: %d %v", code, body)
	}
	code, body = e.do("POST", "/v1/predictions/"+e.ns+":predict", `{"key":"nobody"}`, token)
	if code != 404 {
		t.Fatalf("predict without inputs on a miss: %d %v", code, body)
	}
}

func TestVersionSwitchOnPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.publishRedis("r1", map[string]string{"u": `{"score":1,"model_version":"a","computed_at":"2026-01-01T00:00:00Z"}`})
	waitUntil(t, "r1", func() bool { _, b := e.get("u"); return b["model_version"] == "a" })
	e.publishRedis("r2", map[string]string{"u": `{"score":2,"model_version":"b","computed_at":"2026-01-02T00:00:00Z"}`})
	// VersionPoll is an hour: only the pub/sub notice can switch it.
	waitUntil(t, "r2 via pub/sub", func() bool { _, b := e.get("u"); return b["model_version"] == "b" })
}

func TestRedisDownFallsBackToPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, mutate: func(c *Config) { c.VersionPoll = 50 * time.Millisecond }})
	rec := `{"score":0.75,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`
	e.publishRedis("r1", map[string]string{"user-1": rec})
	e.pg.Exec(t, `INSERT INTO user_scores_run1 VALUES ('user-1', 0.75, 'v-model', '2026-01-01T00:00:00Z')`)
	waitUntil(t, "redis source", func() bool { _, b := e.get("user-1"); return b["source"] == "redis" })

	e.redis.Stop()
	for range 20 {
		start := time.Now()
		code, body := e.get("user-1")
		if code != 200 || body["source"] != "postgres" || body["values"].(map[string]any)["score"] != 0.75 {
			t.Fatalf("with Redis down: %d %v", code, body)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("fallback took %v", d)
		}
	}
	code, body := e.do("GET", "/readyz", "", "")
	if code != 200 || !strings.HasPrefix(fmt.Sprint(body["checks"].(map[string]any)[e.ns+"/redis"]), "error") {
		t.Errorf("readyz with Redis down: %d %v", code, body)
	}

	e.redis.Start()
	e.publishRedis("r1", map[string]string{"user-1": rec})
	waitUntil(t, "back to redis", func() bool { _, b := e.get("user-1"); return b["source"] == "redis" })
}

func TestWritebackServedUntilPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{features: true, writeback: true})
	e.publishRedis("r1", map[string]string{})
	waitUntil(t, "r1", func() bool { v, _ := e.srv.ns[e.ns].redis.version(); return v == "r1" })
	e.addFeatures("user-9", features(9))
	if code, b := e.get("user-9"); code != 200 || b["source"] != "live" {
		t.Fatalf("first: %d %v", code, b)
	}
	c := e.redis.Client(t)
	waitUntil(t, "write-back key", func() bool { return c.Exists(context.Background(), e.ns+":live:r1:user-9").Val() == 1 })
	if ttl := c.TTL(context.Background(), e.ns+":live:r1:user-9").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("write-back TTL %v, want ≤ 1m", ttl)
	}
	// The features are gone: a live answer now can only come from the write-back.
	e.pg.Exec(t, `DELETE FROM user_features`)
	if code, b := e.get("user-9"); code != 200 || b["source"] != "live" {
		t.Fatalf("write-back read: %d %v", code, b)
	}
	// A publish supersedes it.
	e.publishRedis("r2", map[string]string{"user-9": `{"score":0.1,"model_version":"v-model","computed_at":"2026-01-03T00:00:00Z"}`})
	waitUntil(t, "r2 record", func() bool { _, b := e.get("user-9"); return b["source"] == "redis" })
}

// TestWritebacksCoalesced: concurrent live results go to Redis in shared
// pipelines, each with its TTL, not in a round trip each (Redis counts the
// socket reads it serves: far fewer than the write-backs).
func TestWritebacksCoalesced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{writeback: true})
	e.publishRedis("r1", map[string]string{})
	st := e.srv.ns[e.ns].redis
	waitUntil(t, "r1", func() bool { v, _ := st.version(); return v == "r1" })
	c := e.redis.Client(t)
	ctx := context.Background()
	reads := func() int64 {
		for _, l := range strings.Split(c.Info(ctx, "stats").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_reads_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no total_reads_processed in INFO stats")
		return 0
	}
	const n = 200
	before := reads()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := fmt.Sprintf(`{"score":%d,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`, i)
			errs <- st.writeBack(ctx, fmt.Sprintf("wb-%d", i), []byte(rec), time.Minute)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Two reads of ours (the INFO calls) besides the write-backs' pipelines.
	if got := reads() - before; got >= n/2 {
		t.Errorf("%d write-backs took %d socket reads in Redis; want them pipelined (< %d)", n, got, n/2)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		k := e.ns + ":live:r1:wb-" + strconv.Itoa(i)
		if v := c.Get(ctx, k).Val(); !strings.Contains(v, fmt.Sprintf(`"score":%d,`, i)) {
			t.Errorf("%s = %q", k, v)
		}
		if ttl := c.TTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s TTL %v, want ≤ 1m", k, ttl)
		}
	}
}

// TestCoalescedReadWithLiveKeys: one MGET answers requests with and
// without a live write-back key: the record wins over its write-back, the
// write-back answers a missing record (marked live), and the current key
// comes back to every request that named it.
func TestCoalescedReadWithLiveKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noPostgres: true})
	ctx := context.Background()
	c := e.redis.Client(t)
	p := e.ns + ":test:"
	for k, v := range map[string]string{p + "rec-a": "A", p + "live-a": "a", p + "live-b": "b", p + "cur": "v7", p + "rec-d": "D"} {
		if err := c.Set(ctx, k, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []getReq{
		{key: p + "rec-a", live: p + "live-a", current: p + "cur"},
		{key: p + "rec-b", live: p + "live-b", current: p + "cur"},
		{key: p + "rec-c", live: p + "live-c"},
		{key: p + "rec-d", current: p + "cur"},
	}
	got, err := e.srv.ns[e.ns].redis.conn.mget(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []getRes{{rec: []byte("A"), cur: "v7"}, {rec: []byte("b"), cur: "v7", live: true}, {}, {rec: []byte("D"), cur: "v7"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mget = %+v\nwant %+v", got, want)
	}
}

func TestProtection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{mutate: func(c *Config) { c.MaxKeysPerBatch = 3; c.MaxKeyLen = 16; c.MaxBodyBytes = 4096 }})
	p := "/v1/predictions/" + e.ns
	cases := []struct {
		name, method, path, body, tok string
		code                          int
		msg                           string
	}{
		{"no token", "GET", p + "/k", "", "", 401, "bearer token"},
		{"bad token", "GET", p + "/k", "", "s3cret-tokem", 401, "bearer token"},
		{"unknown ns", "GET", "/v1/predictions/nope/k", "", token, 404, `unknown namespace "nope"`},
		{"long key", "GET", p + "/" + strings.Repeat("k", 17), "", token, 400, "17 bytes, limit 16"},
		{"malformed", "POST", p + ":batchGet", `{"keys":[`, token, 400, "malformed JSON"},
		{"unknown field", "POST", p + ":batchGet", `{"key":["a"]}`, token, 400, `unknown field "key"`},
		{"too many keys", "POST", p + ":batchGet", `{"keys":["a","b","c","d"]}`, token, 400, "4 keys, limit 3"},
		{"bad op", "POST", p + ":delete", `{}`, token, 404, "no such operation"},
		{"short input", "POST", p + ":predict", `{"key":"k","inputs":{"features":[1,2,3]}}`, token, 400, "inputs.features: want 16 numbers, got 3"},
		{"wrong input", "POST", p + ":predict", `{"key":"k","inputs":{"feats":[1]}}`, token, 400, "inputs.feats: the model has no such input (have: features)"},
		{"input type", "POST", p + ":predict", `{"key":"k","inputs":{"features":["a"]}}`, token, 400, "inputs.features[0]: want a number"},
		{"column missing", "POST", p + ":predict", `{"key":"k","columns":{"f0":1}}`, token, 400, "columns.f1: missing"},
		{"both", "POST", p + ":predict", `{"key":"k","columns":{},"inputs":{}}`, token, 400, "not both"},
		{"body limit", "POST", p + ":batchGet", `{"keys":["` + strings.Repeat("a", 5000) + `"]}`, token, 413, "over 4096 bytes"},
		{"wrong method", "DELETE", p + "/k", "", token, 405, ""},
	}
	for _, c := range cases {
		code, body := e.do(c.method, c.path, c.body, c.tok)
		if code != c.code || !strings.Contains(fmt.Sprint(body["error"])+fmt.Sprint(body["raw"]), c.msg) {
			t.Errorf("%s: %d %v; want %d %q", c.name, code, body, c.code, c.msg)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := e.do("GET", path, "", ""); code != 200 {
			t.Errorf("%s without a token: %d %v", path, code, body)
		}
	}
}

func TestRefusesToStart(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{InsecureNoAuth: false, Specs: []*jobs.Spec{{Name: "x"}}}); err == nil || !strings.Contains(err.Error(), "no API tokens") {
		t.Errorf("no tokens: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("name: x\nmodell: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{InsecureNoAuth: true, JobsDir: dir})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), "modell") {
		t.Errorf("invalid spec: %v", err)
	}
}

// gated wraps the real model so a test can hold inferences in flight.
type gated struct {
	LiveModel
	gate chan struct{}
}

func (g gated) Predict(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, []string, error) {
	<-g.gate
	return g.LiveModel.Predict(ctx, rec)
}

func TestShedsOverInFlightCap(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	e := newEnv(t, envOpts{mutate: func(c *Config) {
		c.MaxInFlight = 2
		c.LoadModel = func(s *jobs.Spec) (LiveModel, error) {
			m, err := loadRunnerModel(s)
			return gated{m, gate}, err
		}
	}})
	body, _ := json.Marshal(map[string]any{"key": "k", "inputs": map[string]any{"features": features(1)}})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, b := e.do("POST", "/v1/predictions/"+e.ns+":predict", string(body), token); code != 200 {
				t.Errorf("held request: %d %v", code, b)
			}
		}()
	}
	waitUntil(t, "2 in flight", func() bool { return len(e.srv.slots) == 2 })
	code, b := e.get("k")
	if code != 429 {
		t.Errorf("third request: %d %v, want 429", code, b)
	}
	close(gate)
	wg.Wait()
	if code, _ := e.get("k"); code != 404 {
		t.Errorf("after drain: %d, want 404", code)
	}
}

func TestListenAndServeDrains(t *testing.T) {
	t.Parallel()
	rd := testservers.Redis(t)
	spec := &jobs.Spec{Name: "drain", Source: jobs.SourceSpec{Key: "id"}, Serving: jobs.ServingSpec{Live: new(bool)},
		Sinks: jobs.SinksSpec{Redis: &jobs.RedisSinkSpec{Addr: rd.Addr, DB: rd.DB, Namespace: "drain" + rd.Prefix}}}
	srv, err := New(Config{Addr: "127.0.0.1:0", Specs: []*jobs.Spec{spec}, InsecureNoAuth: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not return after cancel")
	}
}

func FuzzDecodeBatchGet(f *testing.F) {
	for _, s := range []string{`{"keys":["a","b"]}`, `{"keys":[1,-2]}`, `{"keys":[]}`, `{}`, `null`, `{"keys":["a"]} x`, `[`,
		`{"keys":["a"],"keys":["b"]}`, `{"keys":["a"],"k\u0065ys":["b"]}`, ` { "keys" : [ "a" ] , "x" : {"keys":1} } `, `{"keys":["a"],}`} {
		f.Add([]byte(s))
	}
	lim := keyLimits{maxKeyLen: 8, maxKeys: 4}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeBatchGet(b, lim)
		if err != nil {
			if _, ok := err.(*badRequest); !ok {
				t.Fatalf("error %v is not a badRequest", err)
			}
			return
		}
		if d := duplicateName(b); d != "" {
			t.Fatalf("body with duplicate field %q accepted", d)
		}
		if len(req.Keys) == 0 || len(req.Keys) > 4 {
			t.Fatalf("%d keys accepted", len(req.Keys))
		}
		for _, k := range req.Keys {
			if k == "" || len(k) > 8 {
				t.Fatalf("key %q accepted", k)
			}
		}
	})
}

func FuzzDecodePredict(f *testing.F) {
	for _, s := range []string{`{"key":"a","inputs":{"x":[1,2]}}`, `{"key":3,"columns":{"c":1,"d":[1]}}`, `{"key":"a"}`, `{"key":""}`, `{"key":"a","inputs":{"x":[1e400]}}`,
		`{"key":"a","key":"b"}`, `{"key":"a","inputs":{"x":[1],"x":[2]}}`, `{"key":"a","columns":{"c":1,"\u0063":2}}`, `{"key":"a","columns":{"d":[1,2],"c":[{"c":1,"c":2}]}}`} {
		f.Add([]byte(s))
	}
	lim := keyLimits{maxKeyLen: 8, maxKeys: 4}
	l := &layout{key: "id", byCol: map[string]int{"c": 0, "d": 1},
		cols:   []layoutCol{{name: "c", elem: arrow.PrimitiveTypes.Float32, width: 1}, {name: "d", elem: arrow.PrimitiveTypes.Float32, list: true, width: 2}},
		inputs: []layoutInput{{name: "x", columns: []string{"c"}, width: 1}, {name: "y", list: "d", width: 2}}}
	l.schema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "c", Type: l.cols[0].arrowType()}, {Name: "d", Type: l.cols[1].arrowType()}}, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodePredict(b, lim)
		if err != nil {
			if _, ok := err.(*badRequest); !ok {
				t.Fatalf("error %v is not a badRequest", err)
			}
			return
		}
		if d := duplicateName(b); d != "" {
			t.Fatalf("body with duplicate field %q accepted", d)
		}
		if req.Key == "" || len(req.Key) > 8 {
			t.Fatalf("key %q accepted", req.Key)
		}
		r, err := l.rowFromPredict(req)
		if err != nil {
			if _, ok := err.(*badRequest); !ok {
				t.Fatalf("layout error %v is not a badRequest", err)
			}
			return
		}
		if len(r.vals[0]) != 1 || len(r.vals[1]) != 2 {
			t.Fatalf("accepted row of shape %d,%d", len(r.vals[0]), len(r.vals[1]))
		}
		rec := l.record(memory.DefaultAllocator, []row{r})
		rec.Release()
	})
}

func TestClientAgainstServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	c := client.New(e.http.URL, token)
	f := features(5)
	in := make([]float64, len(f))
	for i, v := range f {
		in[i] = float64(v)
	}
	p, err := c.Predict(context.Background(), e.ns, "fresh", map[string][]float64{"features": in})
	if err != nil {
		t.Fatal(err)
	}
	var score float32
	if err := p.Value("score", &score); err != nil || p.Source != "live" || math.Abs(float64(score-e.refScore(f))) > 1e-5 {
		t.Fatalf("Predict = %+v (score %v, %v)", p, score, err)
	}
	_, err = c.Predict(context.Background(), e.ns, "fresh", map[string][]float64{"features": in[:3]})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "want 16 numbers, got 3") {
		t.Fatalf("short input: %v", err)
	}
	if _, err := c.Get(context.Background(), e.ns, "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get miss: %v", err)
	}
	if _, err := c.Get(context.Background(), "nope", "k"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown namespace: %v", err)
	}
}

// duplicateName finds a repeated member name in the top-level object of b
// or in an object directly inside it, with encoding/json's tokenizer: an
// implementation independent of the server's scanner.
func duplicateName(b []byte) string {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var walk func(depth int) string
	walk = func(depth int) string {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return ""
		}
		switch d {
		case '[':
			for dec.More() {
				if depth >= 1 {
					var skip json.RawMessage
					if dec.Decode(&skip) != nil {
						return ""
					}
					continue
				}
				if n := walk(depth + 1); n != "" {
					return n
				}
			}
		case '{':
			seen := map[string]bool{}
			for dec.More() {
				name, err := dec.Token()
				if err != nil {
					return ""
				}
				if seen[name.(string)] {
					return name.(string)
				}
				seen[name.(string)] = true
				if depth >= 1 {
					var skip json.RawMessage
					if dec.Decode(&skip) != nil {
						return ""
					}
					continue
				}
				if n := walk(depth + 1); n != "" {
					return n
				}
			}
		}
		_, _ = dec.Token() // the closing delimiter
		return ""
	}
	return walk(0)
}

// decodePredict scans the validated body instead of decoding it with
// encoding/json: whatever it accepts must read as encoding/json reads it.
func FuzzDecodePredictMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{"key":"a","inputs":{"x":[1,2]}}`, ` { "key" : "a\u0062" , "inputs" : { "x\n" : [ 1.5e3 , -0 ] , "y" : [ ] } } `,
		`{"key":7,"inputs":{"é":[1E-2,3]}}`, `{"key":"a","inputs":{"x":[1,2],"x\u0079":[3]}}`} {
		f.Add([]byte(s))
	}
	lim := keyLimits{maxKeyLen: 64, maxKeys: 4}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodePredict(b, lim)
		if err != nil || req.Inputs == nil {
			return
		}
		var ref struct {
			Inputs map[string][]float64 `json:"inputs"`
		}
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", b, err)
		}
		if !reflect.DeepEqual(req.Inputs, ref.Inputs) && !(len(req.Inputs) == 0 && len(ref.Inputs) == 0) {
			t.Fatalf("%q: inputs %v, encoding/json %v", b, req.Inputs, ref.Inputs)
		}
	})
}
