package lookup

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCorruptRecordIsAnError: a stored record that is not a record (text
// that is not JSON, a JSON array, a msgpack map header claiming 4 billion
// entries, one cut short) is an error of its key: GET answers 500 naming
// the key and the store, batchGet gives that key status "error" and
// answers the others, and precog_lookup_corrupt_records_total counts each.
// It is never a miss, which a client would cache as "no prediction".
func TestCorruptRecordIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	corrupt := map[string]string{
		"text":      "this is not JSON",
		"array":     `[1,2,3]`,
		"mp-huge":   "\xdf\xff\xff\xff\xff\xa1a\x01",
		"mp-short":  "\x82\xa5score\xca\x3f",
		"mp-badkey": "\x81\xc1\x01",
	}
	recs := map[string]string{"good": `{"score":0.25,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`}
	for k, v := range corrupt {
		recs[k] = v
	}
	e.publishRedis("r1", recs)
	waitUntil(t, "published version", func() bool { v, ok := e.srv.ns[e.ns].redis.version(); return ok && v == "r1" })

	for k := range corrupt {
		code, body := e.get(k)
		msg, _ := body["error"].(string)
		if code != 500 || !strings.Contains(msg, "corrupt") || !strings.Contains(msg, `"`+k+`"`) || !strings.Contains(msg, "redis") {
			t.Errorf("GET %s: %d %v, want 500 naming the key, the store and the corruption", k, code, body)
		}
	}
	if code, body := e.get("good"); code != 200 {
		t.Fatalf("GET good: %d %v", code, body)
	}
	if code, body := e.get("absent"); code != 404 {
		t.Fatalf("GET absent: %d %v", code, body)
	}

	code, body := e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":["good","text","mp-huge","absent"]}`, token)
	if code != 200 {
		t.Fatalf("batchGet: %d %v", code, body)
	}
	res := body["results"].([]any)
	want := []string{"found", "error", "error", "miss"}
	for i, r := range res {
		m := r.(map[string]any)
		if m["status"] != want[i] {
			t.Errorf("batchGet result %d: %v, want status %s", i, m, want[i])
		}
		msg, _ := m["error"].(string)
		if want[i] == "error" && (m["found"] != false || m["values"] != nil || !strings.Contains(msg, "corrupt")) {
			t.Errorf("batchGet result %d: %v, want found=false, no values and the corruption in error", i, m)
		}
	}
	if got := testutil.ToFloat64(e.srv.metrics.corrupt.WithLabelValues(e.ns, "redis")); got != float64(len(corrupt)+2) {
		t.Fatalf("precog_lookup_corrupt_records_total = %v, want %d", got, len(corrupt)+2)
	}
}
