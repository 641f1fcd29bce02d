package lookup

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model/tokenizer"
)

// TestPredictText: a miss on a text embedding namespace embeds the
// request's text live with the job's tokenizer, pooling and normalization:
// the vector equals the pure-Go reference; empty text is a 400 naming the
// reason, and numeric inputs or unknown text columns are refused.
func TestPredictText(t *testing.T) {
	rd := testservers.Redis(t)
	dir := t.TempDir()
	tm := testgen.NewTextEmbedder(testgen.DefaultSeed)
	if _, err := tm.Write(dir); err != nil {
		t.Fatal(err)
	}
	ns := "titles" + rd.Prefix
	yaml := fmt.Sprintf(`name: title-job
source:
  parquet: { path: data.parquet }
  key: id
model:
  path: text_embedder.onnx
  version: v1
  inputs:
    input_ids:      { text: title, tokenizer: tokenizer.json, max_length: 16 }
    attention_mask: { mask_of: input_ids }
  outputs: { last_hidden_state: embedding }
  pooling: mean
  normalize: l2
sinks:
  redis: { addr: %q, db: %d, namespace: %s }
`, rd.Addr, rd.DB, ns)
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Specs: []*jobs.Spec{spec}, Tokens: []string{token}, StoreTimeout: 2 * time.Second,
		VersionPoll: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	e := &env{t: t, srv: srv, http: hs, redis: rd, ns: ns}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}

	for _, title := range []string{"blue running shoes", "Café naïve — 東京 😀", strings.Repeat("wireless headset ", 30)} {
		body, _ := json.Marshal(map[string]any{"key": "p1", "text": map[string]string{"title": title}})
		code, resp := e.do("POST", "/v1/predictions/"+ns+":predict", string(body), token)
		if code != 200 {
			t.Fatalf("%q: %d %v", title, code, resp)
		}
		values, _ := resp["values"].(map[string]any)
		got, _ := values["embedding"].([]any)
		want := tm.Pool(tok.Encode(nil, title, 16), "mean", true)
		if len(got) != len(want) {
			t.Fatalf("%q: embedding %v, want %d values", title, resp, len(want))
		}
		for j, w := range want {
			if d := math.Abs(got[j].(float64) - w); d > 1e-5 {
				t.Fatalf("%q [%d]: %v, want %v", title, j, got[j], w)
			}
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"key":"p2","text":{"title":"   "}}`, "column title: empty text"},
		{`{"key":"p2","text":{"name":"x"}}`, "text.name: not a text column of the model spec (have: title)"},
		{`{"key":"p2","text":{}}`, "text.title: missing"},
		{`{"key":"p2","inputs":{"input_ids":[1,2]}}`, "text.title: missing"},
		{`{"key":"p2","text":{"title":"x"},"inputs":{"input_ids":[1,2]}}`, "the model reads only text"},
		{`{"key":"p2","text":{"title":3}}`, "text.title: want a string"},
	} {
		code, resp := e.do("POST", "/v1/predictions/"+ns+":predict", tc.body, token)
		if code != 400 || !strings.Contains(fmt.Sprint(resp), tc.want) {
			t.Errorf("%s: %d %v, want 400 %q", tc.body, code, resp, tc.want)
		}
	}
}

// TestPredictStrings: a tensor(string) input's columns are given in
// "text" too; the live score and region (a string output) equal the
// reference.
func TestPredictStrings(t *testing.T) {
	rd := testservers.Redis(t)
	dir := t.TempDir()
	sm := testgen.NewStringModel(testgen.DefaultSeed)
	if _, err := sm.Write(dir); err != nil {
		t.Fatal(err)
	}
	ns := "devices" + rd.Prefix
	yaml := fmt.Sprintf(`name: device-job
source:
  parquet: { path: data.parquet }
  key: id
model:
  path: string_input.onnx
  version: v1
  inputs:
    cat: { columns: [country, device] }
  outputs: { score: score, region: region }
sinks:
  redis: { addr: %q, db: %d, namespace: %s }
`, rd.Addr, rd.DB, ns)
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Specs: []*jobs.Spec{spec}, Tokens: []string{token}, StoreTimeout: 2 * time.Second,
		VersionPoll: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	e := &env{t: t, srv: srv, http: hs, redis: rd, ns: ns}
	for _, c := range [][2]string{{"de", "ios"}, {"Köln", "tv"}, {"xx", "web"}} {
		body, _ := json.Marshal(map[string]any{"key": "u1", "text": map[string]string{"country": c[0], "device": c[1]}})
		code, resp := e.do("POST", "/v1/predictions/"+ns+":predict", string(body), token)
		values, _ := resp["values"].(map[string]any)
		score, region := sm.Reference(c[0], c[1])
		got, _ := values["score"].(float64)
		if code != 200 || math.Abs(got-float64(score)) > 1e-6 || values["region"] != region {
			t.Fatalf("%v: %d %v, want score %v region %q", c, code, resp, score, region)
		}
	}
}
