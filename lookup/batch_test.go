package lookup

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// TestBatchGetPerKeyErrorsAndAge: a bad key (empty, too long, not a string
// or integer) gets its own "error" result and the other keys are answered
// (200); found results carry their age from computed_at and, since the job
// has max_staleness, whether they are stale.
func TestBatchGetPerKeyErrorsAndAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{mutate: func(c *Config) {
		c.MaxKeyLen = 16
		c.Specs[0].MaxStaleness = jobs.Duration{Duration: 6 * time.Hour}
	}})
	fresh := time.Now().UTC().Add(-90 * time.Second).Format(time.RFC3339Nano)
	e.publishRedis("r1", map[string]string{
		"user-1": `{"score":0.25,"model_version":"v-model","computed_at":"2026-01-01T00:00:00Z"}`,
		"user-2": `{"score":0.5,"model_version":"v-model","computed_at":"` + fresh + `"}`,
	})
	waitUntil(t, "published version", func() bool { v, ok := e.srv.ns[e.ns].redis.version(); return ok && v == "r1" })

	code, body := e.do("POST", "/v1/predictions/"+e.ns+":batchGet",
		`{"keys":["user-1","user-2","","user-9",true,"`+strings.Repeat("k", 17)+`"]}`, token)
	if code != 200 {
		t.Fatalf("batchGet with bad keys: %d %v, want 200", code, body)
	}
	res := body["results"].([]any)
	if len(res) != 6 {
		t.Fatalf("batchGet: %d results for 6 keys: %v", len(res), body)
	}
	r := func(i int) map[string]any { return res[i].(map[string]any) }
	for i, want := range map[int]string{2: "keys[2]: key is empty", 4: "keys[4]: want a string or an integer", 5: "keys[5]: key is 17 bytes, limit 16"} {
		if r(i)["status"] != "error" || !strings.Contains(fmt.Sprint(r(i)["error"]), want) || r(i)["found"] != false {
			t.Errorf("result %d = %v, want status error %q", i, r(i), want)
		}
	}
	if r(4)["key"] != "true" {
		t.Errorf("result 4 key = %v, want what was sent (true)", r(4)["key"])
	}
	old, ok := r(0)["age_seconds"].(float64)
	if r(0)["status"] != "found" || !ok || old < (24*time.Hour).Seconds() || r(0)["stale"] != true {
		t.Errorf("old record: %v, want found, age_seconds from 2026-01-01, stale", r(0))
	}
	young, ok := r(1)["age_seconds"].(float64)
	if r(1)["status"] != "found" || !ok || young < 89 || young > 3600 || r(1)["stale"] != false {
		t.Errorf("fresh record: %v, want found, age_seconds about 90, not stale", r(1))
	}
	if r(3)["status"] != "miss" || r(3)["age_seconds"] != nil {
		t.Errorf("missing key: %v, want a miss without an age", r(3))
	}
}
