package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/sinks"
)

var _ sinks.Inventory = (*Sink)(nil)

// Stored implements sinks.Inventory for `precog gc`: every version of the
// namespace whose shard-marker hash ({ns}:shards:{version}, which Prepare
// creates with a "format" field before anything is written) exists, found
// with SCAN on every master, with its key record ({ns}:keys:{version}) when
// there is one. A version is Published when it is current or retained in
// {ns}:versions. Record keys are never scanned, and a key by a bookkeeping
// name that precog did not write that way (another type, no "format") is
// not listed, so another application's keys are never taken for a version.
// With publish: in_place only the markers are precog's to remove (records
// are not kept by version).
func (s *Sink) Stored(ctx context.Context, run sinks.RunInfo) ([]sinks.StoredVersion, error) {
	cur, err := s.Current(ctx, run)
	if err != nil {
		return nil, err
	}
	retained, err := s.Versions(ctx, run)
	if err != nil {
		return nil, err
	}
	expiring, err := s.client.SMembers(ctx, s.layout.GC()).Result()
	if err != nil {
		return nil, s.cfg.sanitize("list "+s.layout.GC(), err)
	}
	prefix := strings.TrimSuffix(s.layout.Shards("x"), "x")
	keys, err := s.scanAll(ctx, prefix+"*")
	if err != nil {
		return nil, err
	}
	var out []sinks.StoredVersion
	for _, key := range keys {
		v := strings.TrimPrefix(key, prefix)
		if ValidVersion(v) != nil {
			continue // not a name precog writes
		}
		fields, err := s.markers(ctx, key)
		if err != nil {
			return nil, err
		}
		if fields == nil {
			continue // not precog's marker hash
		}
		what, err := s.describeVersion(ctx, v, fields, slices.Contains(expiring, v))
		if err != nil {
			return nil, err
		}
		out = append(out, sinks.StoredVersion{Version: v, Current: v == cur, Published: v == cur || slices.Contains(retained, v), What: what})
	}
	return out, nil
}

// markers reads a shard-marker hash; nil when key is not one: another
// type, or a hash with neither the "format" field Prepare writes nor only
// shard markers.
func (s *Sink) markers(ctx context.Context, key string) (map[string]string, error) {
	typ, err := s.client.Type(ctx, key).Result()
	if err != nil {
		return nil, s.cfg.sanitize("TYPE "+key, err)
	}
	if typ != "hash" {
		return nil, nil
	}
	fields, err := s.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, s.cfg.sanitize("HGETALL "+key, err)
	}
	if _, ok := fields["format"]; ok {
		return fields, nil
	}
	// in_place Prepare writes no "format": a hash of shard markers only
	// (and the encoding each marker's writer records).
	for f, raw := range fields {
		if f == EncodingField {
			continue
		}
		var m Marker
		if _, err := strconv.Atoi(f); err != nil || json.Unmarshal([]byte(raw), &m) != nil || m.Nodes == nil {
			return nil, nil
		}
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return fields, nil
}

// describeVersion says what a version holds: the records its committed
// shards' markers count, and the size of its key record.
func (s *Sink) describeVersion(ctx context.Context, v string, markers map[string]string, expiring bool) (string, error) {
	var shards, rows int64
	for f, raw := range markers {
		var m Marker
		if f == "format" || json.Unmarshal([]byte(raw), &m) != nil {
			continue
		}
		shards++
		rows += m.Rows
	}
	desc := fmt.Sprintf("%d records in %d committed shards", rows, shards)
	if s.layout.InPlace {
		return "shard markers " + s.layout.Shards(v) + " (" + desc + "; in_place records are not kept by version and stay)", nil
	}
	n, err := s.client.StrLen(ctx, s.layout.Keys(v)).Result()
	if err != nil {
		return "", s.cfg.sanitize("STRLEN "+s.layout.Keys(v), err)
	}
	what := fmt.Sprintf("keys %s* (%s, key record of %d bytes)", s.layout.RecordPrefix(v), desc, n)
	if expiring {
		what += "; expired by retention, deletion unfinished"
	}
	return what, nil
}

// scanAll lists the keys matching pattern on every master.
func (s *Sink) scanAll(ctx context.Context, pattern string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	scanNode := func(ctx context.Context, c *goredis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, unlinkBatch).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, keys...)
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	err := s.forEachMaster(ctx, scanNode)
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, s.cfg.sanitize("SCAN "+pattern, err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
