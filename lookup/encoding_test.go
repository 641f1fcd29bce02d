package lookup

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup/client"
	"github.com/precog-ml/precog/sinks"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// vecSchema is an embedding job's output: a 100-float vector, a score and
// the bookkeeping fields, keyed by user_id.
var vecSchema = arrow.NewSchema([]arrow.Field{
	{Name: "user_id", Type: arrow.BinaryTypes.String},
	{Name: "score", Type: arrow.PrimitiveTypes.Float32},
	{Name: "vec", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	{Name: sinks.ColModelVersion, Type: arrow.BinaryTypes.String},
	{Name: sinks.ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
}, nil)

// sinkPublish writes keys (the same rows for every version, plus
// "only-{version}") through the real Redis sink with encoding, and
// publishes the version.
func (e *env) sinkPublish(encoding, version string, keys []string) {
	e.t.Helper()
	ctx := context.Background()
	s, err := sinkredis.New(jobs.RedisSinkSpec{Addr: e.redis.Addr, DB: e.redis.DB, Password: e.redis.Password,
		Namespace: e.ns, TTL: jobs.Duration{Duration: time.Hour}, Encoding: jobs.RedisEncoding(encoding), Retain: 5})
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	run := sinks.RunInfo{Job: "vec", RunID: "run-" + version, Version: version, Schema: vecSchema, Key: "user_id"}
	b := array.NewRecordBuilder(memory.DefaultAllocator, vecSchema)
	defer b.Release()
	for i, k := range append(append([]string{}, keys...), "only-"+version) {
		b.Field(0).(*array.StringBuilder).Append(k)
		b.Field(1).(*array.Float32Builder).Append(float32(i)/3 + 0.1)
		l := b.Field(2).(*array.ListBuilder)
		l.Append(true)
		for j := range 100 {
			l.ValueBuilder().(*array.Float32Builder).Append(float32(i*100+j)/7e3 - 0.5)
		}
		b.Field(3).(*array.StringBuilder).Append("m-1")
		b.Field(4).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2024, 11, 1, 12, 0, 0, 123456000, time.UTC).UnixMicro()))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := s.Prepare(ctx, run); err != nil {
		e.t.Fatal(err)
	}
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Write(ctx, rec); err != nil {
		e.t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		e.t.Fatal(err)
	}
}

// answers is what the API and the client return for keys: the raw GET
// bodies, the batchGet results without their ages, and the client's
// predictions without their ages.
func (e *env) answers(keys []string) (gets []string, batch []any, preds []client.Result) {
	e.t.Helper()
	for _, k := range keys {
		req, _ := http.NewRequest("GET", e.http.URL+"/v1/predictions/"+e.ns+"/"+k, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e.t.Fatal(err)
		}
		var sb strings.Builder
		_, _ = fmt.Fprint(&sb, resp.Status, " ")
		buf := make([]byte, 64<<10)
		n, _ := resp.Body.Read(buf)
		for n > 0 {
			sb.Write(buf[:n])
			n, _ = resp.Body.Read(buf)
		}
		resp.Body.Close()
		gets = append(gets, sb.String())
	}
	body, _ := json.Marshal(map[string]any{"keys": keys})
	code, m := e.do("POST", "/v1/predictions/"+e.ns+":batchGet", string(body), token)
	if code != 200 {
		e.t.Fatalf("batchGet: %d %v", code, m)
	}
	for _, r := range m["results"].([]any) {
		delete(r.(map[string]any), "age")
		delete(r.(map[string]any), "age_seconds")
		batch = append(batch, r)
	}
	preds, err := client.New(e.http.URL, token).BatchGet(context.Background(), e.ns, keys)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range preds {
		preds[i].AgeSeconds = 0 // grows between the two reads
	}
	return gets, batch, preds
}

// TestMsgpackRecordsReadBackUnchanged: the same rows published with
// encoding json and then msgpack answer identically through GET,
// :batchGet and the Go client, and a rollback to the JSON version (another
// encoding) serves it again.
func TestMsgpackRecordsReadBackUnchanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noPostgres: true})
	keys := []string{"u-1", "u-2", "u-3"}
	e.sinkPublish(sinkredis.EncodingJSON, "vjson", keys)
	waitUntil(t, "the json version is served", func() bool { c, _ := e.get("only-vjson"); return c == 200 })
	gets, batch, preds := e.answers(keys)
	if !strings.Contains(gets[0], `"vec":[`) || !strings.HasPrefix(gets[0], "200") {
		t.Fatalf("json GET: %s", gets[0])
	}

	e.sinkPublish(sinkredis.EncodingMsgpack, "vmp", keys)
	waitUntil(t, "the msgpack version is served", func() bool { c, _ := e.get("only-vmp"); return c == 200 })
	raw, err := e.redis.Client(t).Get(context.Background(), e.layout().Record("vmp", "u-1")).Bytes()
	if err != nil || !sinkredis.IsMsgpackRecord(raw) {
		t.Fatalf("stored record is not msgpack: %x (%v)", raw[:min(len(raw), 8)], err)
	}
	gets2, batch2, preds2 := e.answers(keys)
	if !reflect.DeepEqual(gets, gets2) {
		t.Fatalf("GET differs:\njson    %v\nmsgpack %v", gets, gets2)
	}
	if !reflect.DeepEqual(batch, batch2) {
		t.Fatalf("batchGet differs:\njson    %v\nmsgpack %v", batch, batch2)
	}
	if !reflect.DeepEqual(preds, preds2) {
		t.Fatalf("client differs:\njson    %+v\nmsgpack %+v", preds, preds2)
	}
	var vec []float32
	if err := preds2[1].Value("vec", &vec); err != nil || len(vec) != 100 || vec[3] != float32(103)/7e3-0.5 {
		t.Fatalf("client vec: %v (%v)", vec, err)
	}

	s, err := sinkredis.New(jobs.RedisSinkSpec{Addr: e.redis.Addr, DB: e.redis.DB, Password: e.redis.Password, Namespace: e.ns, Retain: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Rollback(context.Background(), sinks.RunInfo{Job: "vec"}, "vjson"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the rollback is served", func() bool { c, _ := e.get("only-vmp"); return c == 404 })
	if got, _ := e.redis.Client(t).HGet(context.Background(), e.layout().Meta(), sinkredis.EncodingField).Result(); got != sinkredis.EncodingJSON {
		t.Fatalf("meta encoding after rollback to the json version: %q", got)
	}
	gets3, _, _ := e.answers(keys)
	if !reflect.DeepEqual(gets, gets3) {
		t.Fatalf("GET after rollback differs:\n%v\n%v", gets, gets3)
	}
}
