package jobs

import (
	"reflect"
	"testing"
	"time"
)

// TestNormalize: a sink spec built in code gets the same defaults as a
// loaded one, from the one place that applies them; a numeric field given
// as 0 stays 0 when the loader says it was given (validation refuses it).
func TestNormalize(t *testing.T) {
	var r RedisSinkSpec
	r.Normalize(nil)
	want := RedisSinkSpec{Publish: RedisPublishAtomic, Encoding: RedisEncodingJSON, Retain: 2, PipelineBatch: 512, PipelineDepth: 4,
		Timeout: Duration{5 * time.Second}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("Redis defaults %+v, want %+v", r, want)
	}
	given := RedisSinkSpec{}
	given.Normalize(func(f string) bool { return f != "pipeline_batch" })
	if given.PipelineBatch != 0 || given.PipelineDepth != DefaultPipelineDepth {
		t.Fatalf("pipeline_batch given as 0: %+v", given)
	}
	var p PostgresSinkSpec
	p.Normalize(nil)
	if p.Schema != "public" || p.Mode != PostgresReplace || p.Retain != 2 {
		t.Fatalf("Postgres defaults %+v", p)
	}
	var q ParquetSinkSpec
	q.Normalize(nil)
	if q.Compression != "snappy" || q.Retain != 2 {
		t.Fatalf("Parquet defaults %+v", q)
	}
}
