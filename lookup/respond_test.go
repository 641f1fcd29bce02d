package lookup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// oldPrediction decodes a record the straightforward way (a map of raw
// values, model_version and computed_at lifted out) and encodes it with
// encoding/json: what appendPrediction must equal, value for value.
func oldPrediction(t testing.TB, ns, key string, found *bool, rec []byte, source string) any {
	var values map[string]json.RawMessage
	if err := json.Unmarshal(rec, &values); err != nil {
		t.Fatalf("reference decode of %q: %v", rec, err)
	}
	var version, at string
	if v, ok := values["model_version"]; ok {
		_ = json.Unmarshal(v, &version)
		delete(values, "model_version")
	}
	if v, ok := values["computed_at"]; ok {
		_ = json.Unmarshal(v, &at)
		delete(values, "computed_at")
	}
	b, err := json.Marshal(Prediction{Namespace: ns, Key: key, Found: found, Values: values, ModelVersion: version, ComputedAt: at, Source: source})
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func checkAppendPrediction(t testing.TB, rec []byte) {
	if !isRecord(rec) {
		return
	}
	var spans [2]span // small on purpose: members beyond it must still work
	p, err := splitRecord(rec, spans[:])
	if err != nil {
		t.Fatalf("splitRecord(%q): %v", rec, err)
	}
	found := true
	for _, c := range []struct {
		ns, key string
		found   *bool
	}{{"recs", "user-1", nil}, {"", "ключ \"q\"\n", &found}} {
		out := appendPrediction(nil, c.ns, c.key, c.found, answer{rec: rec, source: SourceRedis}, &p)
		var got any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("record %q: output %q is not JSON: %v", rec, out, err)
		}
		if want := oldPrediction(t, c.ns, c.key, c.found, rec, SourceRedis); !reflect.DeepEqual(got, want) {
			t.Fatalf("record %q:\n got %s\nwant %v", rec, out, want)
		}
	}
}

func TestAppendPredictionMatchesEncodingJSON(t *testing.T) {
	for _, rec := range []string{
		`{"score":0.25,"model_version":"v1","computed_at":"2026-01-01T00:00:00Z"}`,
		`{"items":[1,2,3],"scores":[0.5,-1e-7,3.25],"model_version":"v1","computed_at":"2026-01-01T00:00:00Z"}`,
		` { "model_version" : "v1" , "nested" : {"a":[{"b":"}]\"{"}]} , "s":"x,y\\"z" , "computed_at":"t" } `,
		`{"score":1}`,
		`{}`,
		`{"model_version":"","computed_at":"","score":null,"ok":true,"no":false}`,
		`{"model_version":7,"score":2}`,
		`{"model_version":"a","score":1,"model_version":"b"}`,
		`{"ünï":"ß\u00e9","model_version":"v"}`,
	} {
		checkAppendPrediction(t, []byte(rec))
	}
	if isRecord([]byte(`[1,2]`)) || isRecord([]byte(`{"a":`)) || isRecord([]byte(`"s"`)) || isRecord(nil) {
		t.Error("isRecord accepted a non-object")
	}
}

func FuzzAppendPrediction(f *testing.F) {
	f.Add([]byte(`{"score":0.25,"model_version":"v1","computed_at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"a":[{"b":"}]"}],"model_version":"x","a":2}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, rec []byte) { checkAppendPrediction(t, rec) })
}

// A hit must not turn into a miss because Redis failed: with no other
// store to fall back to, the answer is 503 (retry), never 404 or found=false.
func TestRedisFailureIsNotAMiss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, noPostgres: true, mutate: func(c *Config) { c.VersionPoll = 50 * time.Millisecond }})
	e.publishRedis("r1", map[string]string{"user-1": `{"score":0.5,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`})
	waitUntil(t, "redis hit", func() bool { code, b := e.get("user-1"); return code == 200 && b["source"] == "redis" })
	if code, b := e.get("nobody"); code != 404 {
		t.Fatalf("a real miss with Redis up: %d %v", code, b)
	}

	e.redis.Stop()
	if code, b := e.get("user-1"); code != http.StatusServiceUnavailable {
		t.Fatalf("GET with Redis down: %d %v, want 503", code, b)
	}
	if code, b := e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":["user-1","nobody"]}`, token); code != http.StatusServiceUnavailable {
		t.Fatalf("batchGet with Redis down: %d %v, want 503", code, b)
	}
	e.redis.Start()
	e.publishRedis("r1", map[string]string{"user-1": `{"score":0.5,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`})
	waitUntil(t, "back to redis", func() bool { code, b := e.get("user-1"); return code == 200 && b["source"] == "redis" })
}

// Concurrent GETs are coalesced into MGETs: every caller still gets its
// own key's record.
func TestConcurrentGetsCoalesced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	const n = 300
	recs := map[string]string{}
	for i := range n {
		recs["k"+strconv.Itoa(i)] = fmt.Sprintf(`{"score":%d,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`, i)
	}
	e.publishRedis("r1", recs)
	waitUntil(t, "published", func() bool { v, ok := e.srv.ns[e.ns].redis.version(); return ok && v == "r1" })
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				code, b := e.get("k" + strconv.Itoa(i))
				if code != 200 || b["source"] != "redis" || b["values"].(map[string]any)["score"] != float64(i) {
					t.Errorf("key k%d: %d %v", i, code, b)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A server started while Redis is down does not know the published version
// yet: that is not "nothing published", so a GET answers 503, not 404, and
// the first successful poll brings the hits back.
func TestUnknownVersionIsNotAMiss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, noPostgres: true})
	rec := `{"score":0.5,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`
	e.publishRedis("r1", map[string]string{"user-1": rec})
	e.redis.Stop()
	srv, err := New(Config{Specs: []*jobs.Spec{e.srv.ns[e.ns].spec}, InsecureNoAuth: true, VersionPoll: 50 * time.Millisecond,
		StoreTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	get := func() int {
		resp, err := http.Get(hs.URL + "/v1/predictions/" + e.ns + "/user-1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("GET before Redis was ever reached: %d, want 503", code)
	}
	e.redis.Start()
	e.publishRedis("r1", map[string]string{"user-1": rec})
	waitUntil(t, "hit after Redis came up", func() bool { return get() == 200 })
}

// TestMarkStale: a record older than the job's max_staleness gets its age
// in X-Precog-Stale-Age; a fresh one, or a job without max_staleness, none.
func TestMarkStale(t *testing.T) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	spec := &jobs.Spec{MaxStaleness: jobs.Duration{Duration: 6 * time.Hour}}
	for _, tc := range []struct {
		spec *jobs.Spec
		ca   string
		want string
	}{
		{spec, `"2026-11-02T00:00:00Z"`, "43200"},
		{spec, `"2026-11-02T08:00:00.123456Z"`, ""},
		{&jobs.Spec{}, `"2026-10-01T00:00:00Z"`, ""},
		{spec, `"not a time"`, ""},
		{spec, ``, ""},
	} {
		rec := httptest.NewRecorder()
		markStale(rec, tc.spec, []byte(tc.ca), now)
		if got := rec.Header().Get(StaleAgeHeader); got != tc.want {
			t.Errorf("computed_at %s: header %q, want %q", tc.ca, got, tc.want)
		}
	}
}

// A miss is confirmed against {ns}:current read in the same MGET as the
// record, not by a GET of its own: under live load (every :predict of a
// new key misses) that GET was a second Redis round trip per request. A
// version published without a notice is still found by the miss.
func TestMissConfirmedInTheSameRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{privateRedis: true, noPostgres: true})
	rec := `{"score":0.5,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`
	e.publishRedis("r1", map[string]string{"user-1": rec})
	waitUntil(t, "published", func() bool { v, ok := e.srv.ns[e.ns].redis.version(); return ok && v == "r1" })
	c := e.redis.Client(t)
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const misses = 10
	for i := range misses {
		if code, b := e.get("absent-" + strconv.Itoa(i)); code != http.StatusNotFound {
			t.Fatalf("absent key: %d %v", code, b)
		}
	}
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stats, "cmdstat_get:") {
		t.Fatalf("a miss sent a GET of its own:\n%s", stats)
	}
	if !strings.Contains(stats, "cmdstat_mget:calls="+strconv.Itoa(misses)+",") {
		t.Fatalf("want %d MGETs (record and current together):\n%s", misses, stats)
	}

	// r2 published without a notice: the miss under r1 reads r2's current
	// in the same MGET and reads the key again under r2.
	if err := c.Set(ctx, e.layout().Record("r2", "user-2"), rec, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, e.layout().Current(), "r2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if code, b := e.get("user-2"); code != http.StatusOK || b["source"] != "redis" {
		t.Fatalf("key of a version published without a notice: %d %v", code, b)
	}
	if v, _ := e.srv.ns[e.ns].redis.version(); v != "r2" {
		t.Fatalf("version after the miss: %q, want r2", v)
	}
}
