package lookup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// TestNamespaceMetadata: GET /v1/namespaces/{namespace} answers the
// version readers get, when it was published and how many records it
// holds, from what the Redis sink's own Publish recorded; it needs a token
// and knows only the namespaces served (issue 31.17: no such endpoint).
func TestNamespaceMetadata(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	if code, _ := e.do("GET", "/v1/namespaces/"+e.ns, "", ""); code != 401 {
		t.Fatalf("without a token: %d, want 401", code)
	}
	code, body := e.do("GET", "/v1/namespaces/"+e.ns, "", token)
	if code != 200 || body["version"] != "" || body["job"] != "ranker-job" || body["rows"] != nil {
		t.Fatalf("before any publish: %d %v", code, body)
	}
	if code, _ := e.do("GET", "/v1/namespaces/nope", "", token); code != 404 {
		t.Fatalf("unknown namespace: %d, want 404", code)
	}

	// Two committed shards of 3 and 4 records, published by the sink.
	l := e.layout()
	c := e.redis.Client(t)
	c.HSet(ctx, l.Shards("v1"), "format", 1, sinkredis.EncodingField, "json",
		sinkredis.ShardField(0), `{"rows":3,"nodes":[]}`, sinkredis.ShardField(1), `{"rows":4,"nodes":[]}`)
	snk, err := sinkredis.New(jobs.RedisSinkSpec{Addr: e.redis.Addr, DB: e.redis.DB, Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	before := time.Now().Add(-time.Second)
	if err := snk.Publish(ctx, sinks.RunInfo{Job: "ranker-job", RunID: "r1", Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	code, body = e.do("GET", "/v1/namespaces/"+e.ns, "", token)
	if code != 200 || body["version"] != "v1" || body["rows"] != float64(7) || body["encoding"] != "json" || body["mode"] != "atomic" {
		t.Fatalf("after the publish: %d %v", code, body)
	}
	at, err := time.Parse(time.RFC3339Nano, body["published_at"].(string))
	if err != nil || at.Before(before) {
		t.Fatalf("published_at %v (%v), want the publish time", body["published_at"], err)
	}
	if stores, _ := body["stores"].([]any); len(stores) != 2 || stores[0] != "redis" || stores[1] != "postgres" {
		t.Fatalf("stores %v, want [redis postgres]", body["stores"])
	}
}

// TestBatchGetKeysNotAnArray: a "keys" that is not an array says that the
// array may hold strings or integers (issue 31.17: "want an array of
// strings" although integers are allowed).
func TestBatchGetKeysNotAnArray(t *testing.T) {
	e := newEnv(t, envOpts{noPostgres: true})
	code, body := e.do("POST", "/v1/predictions/"+e.ns+":batchGet", `{"keys":"42"}`, token)
	if msg, _ := body["error"].(string); code != 400 || !strings.Contains(msg, "strings or integers") {
		t.Fatalf(`{"keys":"42"}: %d %v`, code, body)
	}
}
