package lookup

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
)

// The hot paths' allocations per request, measured on the handler (below
// net/http, whose own allocations this package does not choose): fewer
// allocations mean fewer GC cycles, and GC assists are what lands in an
// unlucky request's tail.

// sinkWriter is a ResponseWriter that keeps the status and counts the body.
type sinkWriter struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (w *sinkWriter) Header() http.Header         { return w.h }
func (w *sinkWriter) WriteHeader(code int)        { w.code = code }
func (w *sinkWriter) Write(b []byte) (int, error) { return w.body.Write(b) }

func (w *sinkWriter) reset() {
	clear(w.h)
	w.code = 0
	w.body.Reset()
}

// replayBody is a request body that can be read again after reset.
type replayBody struct{ bytes.Reader }

func (*replayBody) Close() error { return nil }

// hotEnv is a server over real Redis with one stored record, and the
// requests of the two hot paths: a GET hit and a live :predict.
type hotEnv struct {
	e       *env
	w       sinkWriter
	get     *http.Request
	predict *http.Request
	body    []byte
	pbody   replayBody
}

func newHotEnv(t testing.TB) *hotEnv { return newHotEnvWith(t, envOpts{noPostgres: true}) }

func newHotEnvWith(t testing.TB, o envOpts) *hotEnv {
	e := newEnv(t, o)
	e.publishRedis("r1", map[string]string{"user-1": `{"score":0.25,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`})
	h := &hotEnv{e: e, w: sinkWriter{h: http.Header{}}}
	waitUntil(t, "the published version", func() bool { v, ok := e.srv.ns[e.ns].redis.version(); return ok && v == "r1" })
	h.get, _ = http.NewRequest("GET", "/v1/predictions/"+e.ns+"/user-1", nil)
	h.get.Header.Set("Authorization", "Bearer "+token)
	h.body, _ = json.Marshal(map[string]any{"key": "new-key", "inputs": map[string]any{"features": features(3)}})
	h.predict, _ = http.NewRequest("POST", "/v1/predictions/"+e.ns+":predict", nil)
	h.predict.Header.Set("Authorization", "Bearer "+token)
	h.predict.ContentLength = int64(len(h.body))
	return h
}

func (h *hotEnv) serveGet(t testing.TB) {
	h.w.reset()
	h.e.srv.ServeHTTP(&h.w, h.get)
	if h.w.code != 200 {
		t.Fatalf("GET hit: %d %s", h.w.code, h.w.body.Bytes())
	}
}

func (h *hotEnv) servePredict(t testing.TB) {
	h.w.reset()
	h.pbody.Reset(h.body)
	h.predict.Body = &h.pbody
	h.e.srv.ServeHTTP(&h.w, h.predict)
	if h.w.code != 200 || !bytes.Contains(h.w.body.Bytes(), []byte(`"source":"live"`)) {
		t.Fatalf("predict: %d %s", h.w.code, h.w.body.Bytes())
	}
}

// TestHotPathAllocations bounds the allocations of a GET hit and of a live
// :predict (one row: a batch of its own, inference included). The ceilings
// are what the paths allocate now plus a little slack for the runtime;
// a change that adds allocations per request fails here.
func TestHotPathAllocations(t *testing.T) {
	h := newHotEnv(t)
	for _, c := range []struct {
		name  string
		serve func(testing.TB)
		max   float64
	}{
		{"get hit", h.serveGet, getAllocCeiling},
		{"live predict", h.servePredict, predictAllocCeiling},
	} {
		c.serve(t) // warm pools and connections
		got := testing.AllocsPerRun(200, func() { c.serve(t) })
		t.Logf("%s: %.1f allocations per request", c.name, got)
		if got > c.max {
			t.Errorf("%s: %.1f allocations per request, ceiling %.0f", c.name, got, c.max)
		}
	}
}

// Ceilings of TestHotPathAllocations: measured 34 (GET hit) and 384
// (predict, one row a batch: most are the batch's Arrow and ONNX Runtime
// allocations, shared by every row of a batch under load).
const (
	getAllocCeiling     = 40
	predictAllocCeiling = 450
)

func BenchmarkGetHit(b *testing.B) {
	h := newHotEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		h.serveGet(b)
	}
}

func BenchmarkPredictLive(b *testing.B) {
	h := newHotEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		h.servePredict(b)
	}
}

// BenchmarkPredictLiveParallel sends :predict from 32 goroutines per
// core, so rows meet in batches as under load: ns/op is the server's
// cost per request, inference included; with serving.writeback_ttl set,
// each live answer is also written back to Redis.
func BenchmarkPredictLiveParallel(b *testing.B) {
	b.Run("writeback=off", func(b *testing.B) { benchPredictLiveParallel(b, newHotEnv(b)) })
	b.Run("writeback=on", func(b *testing.B) {
		benchPredictLiveParallel(b, newHotEnvWith(b, envOpts{noPostgres: true, writeback: true}))
	})
}

func benchPredictLiveParallel(b *testing.B, h *hotEnv) {
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		w := sinkWriter{h: http.Header{}}
		var body replayBody
		for i := 0; pb.Next(); i++ {
			r := h.predict.Clone(h.predict.Context())
			k, _ := json.Marshal(map[string]any{"key": "k-" + strconv.Itoa(i), "inputs": map[string]any{"features": features(int64(i % 100))}})
			body.Reset(k)
			r.Body = &body
			w.reset()
			h.e.srv.ServeHTTP(&w, r)
			if w.code != 200 {
				b.Errorf("predict: %d %s", w.code, w.body.Bytes())
				return
			}
		}
	})
}
