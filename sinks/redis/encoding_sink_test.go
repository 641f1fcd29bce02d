package redis

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// checkEncodedVersion asserts that rows [0, n) of run are stored under its
// version in encoding and decode (as readers do) to the exact rows.
func checkEncodedVersion(t *testing.T, c *goredis.Client, ns string, run sinks.RunInfo, n, nItems int, encoding string) {
	t.Helper()
	got := readAll(t, c, ns+":"+run.Version+":*")
	if len(got) != n {
		t.Fatalf("version %s: %d keys, want %d", run.Version, len(got), n)
	}
	for i := 0; i < n; i++ {
		raw := got[RecordKey(ns, run.Version, strconv.Itoa(i))]
		if IsMsgpackRecord([]byte(raw)) != (encoding == EncodingMsgpack) {
			t.Fatalf("version %s row %d: not %s: %q", run.Version, i, encoding, raw[:min(len(raw), 16)])
		}
		js, err := AppendRecordJSON(nil, []byte(raw))
		if err != nil {
			t.Fatalf("version %s row %d: %v", run.Version, i, err)
		}
		checkRecord(t, run, i, nItems, string(js))
	}
}

// TestEncodingsAcrossVersions: versions written with different encodings
// in one namespace each record their encoding; publish and rollback put the
// current version's encoding in {ns}:meta; retention deletes versions of
// either encoding entirely.
func TestEncodingsAcrossVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	ns := rs.Prefix
	sinkFor := map[string]*Sink{
		EncodingJSON:    newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Retain = 2 }),
		EncodingMsgpack: newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Retain = 2; sp.Encoding = jobs.RedisEncodingMsgpack }),
	}
	s := sinkFor[EncodingJSON]
	metaEncoding := func() string { return c.HGet(ctx, metaKey(ns), EncodingField).Val() }
	publish := func(v, enc string) {
		t.Helper()
		run := testRun(v)
		if err := writeShard(ctx, sinkFor[enc], run, 0, 0, 300, 100, 3); err != nil {
			t.Fatal(err)
		}
		if err := sinkFor[enc].Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
		if got := metaEncoding(); got != enc {
			t.Fatalf("meta encoding after publishing %s: %q, want %s", v, got, enc)
		}
		time.Sleep(2 * time.Millisecond) // distinct publish times (ms scores)
	}
	waitGC := func() {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, s := range sinkFor {
			if err := s.WaitCleanup(wctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := func(v string) {
		t.Helper()
		if n := len(readAll(t, c, ns+":"+v+":*")); n != 0 {
			t.Fatalf("collected version %s still has %d records", v, n)
		}
		if n := c.Exists(ctx, s.layout.Shards(v), s.layout.Keys(v)).Val(); n != 0 {
			t.Fatalf("collected version %s left its markers or key record", v)
		}
	}

	publish("v1", EncodingJSON)
	publish("v2", EncodingMsgpack)
	for v, want := range map[string]string{"v1": EncodingJSON, "v2": EncodingMsgpack} {
		if got, err := s.VersionEncoding(ctx, v); err != nil || got != want {
			t.Fatalf("VersionEncoding(%s) = %q, %v; want %s", v, got, err, want)
		}
	}
	checkEncodedVersion(t, c, ns, testRun("v1"), 300, 3, EncodingJSON)
	checkEncodedVersion(t, c, ns, testRun("v2"), 300, 3, EncodingMsgpack)

	// Rollback from the msgpack version to the JSON one, by the msgpack
	// sink: the recorded encoding follows the version.
	if err := sinkFor[EncodingMsgpack].Rollback(ctx, testRun("v2"), "v1"); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.Current(ctx, testRun("v1")); cur != "v1" || metaEncoding() != EncodingJSON {
		t.Fatalf("after rollback: current %q, meta encoding %q", cur, metaEncoding())
	}

	// Retention keeps the new and the newest other: v1 (json) goes.
	publish("v3", EncodingMsgpack)
	waitGC()
	if vs, _ := s.Versions(ctx, testRun("v3")); !slices.Equal(vs, []string{"v3", "v2"}) {
		t.Fatalf("versions = %v, want [v3 v2]", vs)
	}
	gone("v1")
	// Back to v2, then a JSON publish collects it (msgpack).
	if err := s.Rollback(ctx, testRun("v3"), "v2"); err != nil || metaEncoding() != EncodingMsgpack {
		t.Fatalf("rollback to v2: %v, meta encoding %q", err, metaEncoding())
	}
	publish("v4", EncodingJSON)
	waitGC()
	if vs, _ := s.Versions(ctx, testRun("v4")); !slices.Equal(vs, []string{"v4", "v3"}) {
		t.Fatalf("versions = %v, want [v4 v3]", vs)
	}
	gone("v2")
	checkEncodedVersion(t, c, ns, testRun("v3"), 300, 3, EncodingMsgpack)
	checkEncodedVersion(t, c, ns, testRun("v4"), 300, 3, EncodingJSON)
}
