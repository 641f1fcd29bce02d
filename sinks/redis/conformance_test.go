package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// TestConformance runs the shared sink suite against a real redis-server,
// each case in its own DB index and namespace.
func TestConformance(t *testing.T) {
	sinktest.Exercise(t, sinktest.Harness{
		New: func(t *testing.T) sinks.Sink {
			rs := testservers.Redis(t)
			s, err := New(jobs.RedisSinkSpec{
				Addr: rs.Addr, DB: rs.DB, Namespace: rs.Prefix,
				TTL: jobs.Duration{Duration: time.Hour}, PipelineBatch: 16, PipelineDepth: 3,
			})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Read:      readSnapshot,
		LoseShard: loseShardMarker,
	})
}

// TestConformanceMsgpack runs the suite with encoding: msgpack; its
// reader decodes records as the lookup API does.
func TestConformanceMsgpack(t *testing.T) {
	sinktest.Exercise(t, sinktest.Harness{
		New: func(t *testing.T) sinks.Sink {
			rs := testservers.Redis(t)
			s, err := New(jobs.RedisSinkSpec{
				Addr: rs.Addr, DB: rs.DB, Namespace: rs.Prefix, Encoding: jobs.RedisEncodingMsgpack,
				TTL: jobs.Duration{Duration: time.Hour}, PipelineBatch: 16, PipelineDepth: 3,
			})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Read:      readSnapshot,
		LoseShard: loseShardMarker,
	})
}

// TestConformanceCluster runs the suite against a three-master Redis
// Cluster (one for all cases, a namespace each): markers, key records and
// server state checks span nodes there.
func TestConformanceCluster(t *testing.T) {
	addrs := newCluster(t)
	var seq atomic.Int64
	sinktest.Exercise(t, sinktest.Harness{
		New: func(t *testing.T) sinks.Sink {
			s, err := New(jobs.RedisSinkSpec{
				Addrs: addrs, Namespace: fmt.Sprintf("c%d", seq.Add(1)),
				TTL: jobs.Duration{Duration: time.Hour}, PipelineBatch: 16, PipelineDepth: 3,
			})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Read:      readSnapshot,
		LoseShard: loseShardMarker,
	})
}

// loseShardMarker deletes a shard's commit marker, as a restart without
// persistence or an eviction of the marker would.
func loseShardMarker(ctx context.Context, ss sinks.Sink, run sinks.RunInfo, index int) error {
	s := ss.(*Sink)
	return s.client.HDel(ctx, s.layout.Shards(run.Version), ShardField(index)).Err()
}

// readSnapshot reads like an application: resolve current, then every
// record of that version, decoded and canonicalised by the run's schema.
func readSnapshot(ctx context.Context, ss sinks.Sink, run sinks.RunInfo) (sinktest.Snapshot, error) {
	s := ss.(*Sink)
	c := s.client
	ns := s.cfg.namespace
	version, err := c.Get(ctx, CurrentKey(ns)).Result()
	if errors.Is(err, goredis.Nil) {
		return sinktest.Snapshot{}, nil
	}
	if err != nil {
		return sinktest.Snapshot{}, err
	}
	prefix := ns + ":" + version + ":"
	var mu sync.Mutex
	seen := map[string]bool{}
	var keys []string
	scan := func(ctx context.Context, c *goredis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			if k := iter.Val(); !seen[k] { // SCAN may repeat a key
				seen[k] = true
				keys = append(keys, k)
			}
			mu.Unlock()
		}
		return iter.Err()
	}
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		err = cc.ForEachMaster(ctx, scan)
	case *goredis.Client:
		err = scan(ctx, cc)
	}
	if err != nil {
		return sinktest.Snapshot{}, err
	}
	snap := sinktest.Snapshot{Version: version, Rows: map[string]sinktest.Row{}}
	keyType := run.Schema.Field(run.Schema.FieldIndices(run.Key)[0]).Type
	for lo := 0; lo < len(keys); lo += 500 {
		hi := min(lo+500, len(keys))
		vals, err := getAll(ctx, c, keys[lo:hi])
		if err != nil {
			return snap, err
		}
		for i, v := range vals {
			raw, ok := v.(string)
			if !ok {
				return snap, fmt.Errorf("%s vanished while reading version %s", keys[lo+i], version)
			}
			// Decoded as readers do (AppendRecordJSON), after checking
			// that the record is in the sink's encoding.
			if IsMsgpackRecord([]byte(raw)) != (s.cfg.encoding == EncodingMsgpack) {
				return snap, fmt.Errorf("%s: record %q is not in the sink's encoding %s", keys[lo+i], raw[:min(len(raw), 16)], s.cfg.encoding)
			}
			js, err := AppendRecordJSON(nil, []byte(raw))
			if err != nil {
				return snap, fmt.Errorf("%s: %w", keys[lo+i], err)
			}
			dec := json.NewDecoder(strings.NewReader(string(js)))
			dec.UseNumber()
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				return snap, fmt.Errorf("%s: %w", keys[lo+i], err)
			}
			row := sinktest.Row{}
			for name, val := range obj {
				idx := run.Schema.FieldIndices(name)
				if len(idx) != 1 {
					return snap, fmt.Errorf("%s: field %q not in the run schema", keys[lo+i], name)
				}
				cv, err := sinktest.Canon(run.Schema.Field(idx[0]).Type, val)
				if err != nil {
					return snap, fmt.Errorf("%s: field %q: %w", keys[lo+i], name, err)
				}
				row[name] = cv
			}
			key := strings.TrimPrefix(keys[lo+i], prefix)
			kv, err := sinktest.Canon(keyType, key)
			if err != nil {
				return snap, fmt.Errorf("%s: key: %w", keys[lo+i], err)
			}
			row[run.Key] = kv
			snap.Rows[key] = row
			snap.Records++
		}
	}
	return snap, nil
}

// getAll reads keys with pipelined GETs (a cluster has no cross-slot
// MGET); a missing key reads as nil.
func getAll(ctx context.Context, c goredis.UniversalClient, keys []string) ([]any, error) {
	pipe := c.Pipeline()
	cmds := make([]*goredis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	out := make([]any, len(keys))
	for i, cmd := range cmds {
		if v, err := cmd.Result(); err == nil {
			out[i] = v
		}
	}
	return out, nil
}
