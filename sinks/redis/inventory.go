package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/sinks"
)

var _ sinks.Inventory = (*Sink)(nil)

// Stored implements sinks.Inventory for `precog gc`: every version of the
// namespace with a key record ({ns}:keys:{version}, a string) or a
// shard-marker hash ({ns}:shards:{version}), found with SCAN on every
// master. A version is Published when it is current or retained in
// {ns}:versions. Record keys are never scanned, so a version is found only
// through the bookkeeping precog writes for it; with publish: in_place only
// the markers are (records are not kept by version, and a key record name
// could be a user's entity key).
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
	found := map[string]*versionKeys{}
	// Each kind of bookkeeping key: its prefix before the version, and the
	// Redis type precog writes it as.
	type kind struct {
		prefix, typ string
		keyRecord   bool
	}
	kinds := []kind{{strings.TrimSuffix(s.layout.Shards("x"), "x"), "hash", false}}
	if !s.layout.InPlace {
		kinds = append(kinds, kind{strings.TrimSuffix(s.layout.Keys("x"), "x"), "string", true})
	}
	for _, k := range kinds {
		keys, err := s.scanAll(ctx, k.prefix+"*")
		if err != nil {
			return nil, err
		}
		for _, key := range keys {
			v := strings.TrimPrefix(key, k.prefix)
			if ValidVersion(v) != nil {
				continue // not a name precog writes
			}
			typ, err := s.client.Type(ctx, key).Result()
			if err != nil {
				return nil, s.cfg.sanitize("TYPE "+key, err)
			}
			if typ != k.typ {
				continue // a user's key (in_place entity key "shards:…")
			}
			if found[v] == nil {
				found[v] = &versionKeys{}
			}
			if k.keyRecord {
				found[v].keys = true
			} else {
				found[v].shards = true
			}
		}
	}
	out := make([]sinks.StoredVersion, 0, len(found))
	for v, vk := range found {
		what, err := s.describeVersion(ctx, v, vk, slices.Contains(expiring, v))
		if err != nil {
			return nil, err
		}
		out = append(out, sinks.StoredVersion{Version: v, Current: v == cur, Published: v == cur || slices.Contains(retained, v), What: what})
	}
	slices.SortFunc(out, func(a, b sinks.StoredVersion) int { return strings.Compare(a.Version, b.Version) })
	return out, nil
}

// versionKeys is which bookkeeping keys a version has.
type versionKeys struct{ keys, shards bool }

// describeVersion says what a version holds: the records its committed
// shards' markers count, and the size of its key record.
func (s *Sink) describeVersion(ctx context.Context, v string, vk *versionKeys, expiring bool) (string, error) {
	var parts []string
	if vk.shards {
		fields, err := s.client.HGetAll(ctx, s.layout.Shards(v)).Result()
		if err != nil {
			return "", s.cfg.sanitize("HGETALL "+s.layout.Shards(v), err)
		}
		var shards, rows int64
		for f, raw := range fields {
			var m Marker
			if f == "format" || json.Unmarshal([]byte(raw), &m) != nil {
				continue
			}
			shards++
			rows += m.Rows
		}
		parts = append(parts, fmt.Sprintf("%d records in %d committed shards", rows, shards))
	}
	if vk.keys {
		n, err := s.client.StrLen(ctx, s.layout.Keys(v)).Result()
		if err != nil {
			return "", s.cfg.sanitize("STRLEN "+s.layout.Keys(v), err)
		}
		parts = append(parts, fmt.Sprintf("key record of %d bytes", n))
	}
	what := "keys " + s.layout.RecordPrefix(v) + "* (" + strings.Join(parts, ", ") + ")"
	if s.layout.InPlace {
		what = "shard markers " + s.layout.Shards(v) + " (" + strings.Join(parts, ", ") + "; in_place records are not kept by version and stay)"
	}
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
	var err error
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, scanNode)
	case *goredis.Client:
		err = scanNode(ctx, c)
	default:
		err = fmt.Errorf("unsupported client type %T", s.client)
	}
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, s.cfg.sanitize("SCAN "+pattern, err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
