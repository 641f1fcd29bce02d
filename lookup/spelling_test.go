package lookup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// TestStoredAndLiveSpellStringsAlike: a string output is spelled the same
// byte for byte in the record the Redis sink stores, in a GET of that
// record, and in a live answer for the same value (a StringNormalizer
// model that passes the lower-case text through). On main the live answer
// escaped <, >, & and U+2028 (encoding/json) while the sink copied them.
func TestStoredAndLiveSpellStringsAlike(t *testing.T) {
	rd := testservers.Redis(t)
	dir := t.TempDir()
	if _, err := testgen.WriteNormalizerModel(dir); err != nil {
		t.Fatal(err)
	}
	ns := "spell" + rd.Prefix
	yaml := fmt.Sprintf(`name: spell-job
source:
  parquet: { path: data.parquet }
  key: id
model:
  path: %s.onnx
  version: v1
  inputs:
    text: { columns: [text] }
  outputs: { lower: lower }
sinks:
  redis: { addr: %q, db: %d, namespace: %s }
`, testgen.NormalizerModelName, rd.Addr, rd.DB, ns)
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Already lower case: the model's output is the input.
	const text = "<a href=\"x\">&amp;</a> \u2028\u2029 tab\t ctl\x01 back\\slash köln"

	// The stored record, written by the real sink.
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "lower", Type: arrow.BinaryTypes.String},
		{Name: sinks.ColModelVersion, Type: arrow.BinaryTypes.String},
		{Name: sinks.ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	ctx := context.Background()
	s, err := sinkredis.New(*spec.Sinks.Redis)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := sinks.RunInfo{Job: "spell-job", RunID: "run-1", Version: "v1run", Schema: schema, Key: "id"}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("stored")
	b.Field(1).(*array.StringBuilder).Append(text)
	b.Field(2).(*array.StringBuilder).Append("v1")
	b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMicro()))
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	raw, err := rd.Client(t).Get(ctx, sinkredis.Layout{Namespace: ns}.Record(run.Version, "stored")).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	stored := spelling(t, "stored record", raw)

	srv, err := New(Config{Specs: []*jobs.Spec{spec}, Tokens: []string{token}, StoreTimeout: 2 * time.Second,
		VersionPoll: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	call := func(method, path, body string) []byte {
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	got := spelling(t, "GET of the stored record", call("GET", "/v1/predictions/"+ns+"/stored", ""))
	body, _ := json.Marshal(map[string]any{"key": "live-1", "text": map[string]string{"text": text}})
	live := spelling(t, "live answer", call("POST", "/v1/predictions/"+ns+":predict", string(body)))
	if !bytes.Equal(stored, got) || !bytes.Equal(stored, live) {
		t.Fatalf("one string, three spellings:\nstored %s\nGET    %s\nlive   %s", stored, got, live)
	}
	if !bytes.Contains(stored, []byte("<a href")) {
		t.Fatalf("stored spelling %s: <, >, & are JSON, not HTML, and are copied", stored)
	}
}

// spelling is the raw JSON text of the "lower" member in b.
func spelling(t *testing.T, what string, b []byte) []byte {
	t.Helper()
	i := bytes.Index(b, []byte(`"lower":`))
	if i < 0 {
		t.Fatalf("%s: no lower in %s", what, b)
	}
	var raw json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(b[i+len(`"lower":`):])).Decode(&raw); err != nil {
		t.Fatalf("%s: %v in %s", what, err, b)
	}
	return raw
}
