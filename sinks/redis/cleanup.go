package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// unlinkBatch is the number of keys per UNLINK command (or per pipeline of
// single-key UNLINKs in a cluster), and the COUNT hint of fallback SCANs.
const unlinkBatch = 1000

// keyRecordChunk is how much of a key record one GETRANGE reads.
const keyRecordChunk = 1 << 20

// expire moves versions beyond retention (never current) from the
// versions list to the gc set: added to gc first, so a crash in between
// leaves a version listed twice rather than forgotten with its keys.
func (s *Sink) expire(ctx context.Context, current string) error {
	ns := s.cfg.namespace
	all, err := s.client.ZRevRange(ctx, VersionsKey(ns), 0, -1).Result()
	if err != nil {
		return s.cfg.sanitize("retention: list versions", err)
	}
	kept := 0
	for _, v := range all {
		if v == current || kept < s.cfg.retain-1 {
			if v != current {
				kept++
			}
			continue
		}
		if err := s.client.SAdd(ctx, gcKey(ns), v).Err(); err != nil {
			return s.cfg.sanitize("retention: mark "+v, err)
		}
		if err := s.client.ZRem(ctx, VersionsKey(ns), v).Err(); err != nil {
			return s.cfg.sanitize("retention: unlist "+v, err)
		}
		s.log.Info("redis version expired; deleting its keys in the background", "version", v)
	}
	return nil
}

// startGC applies retention (when current is set) and deletes the keys of
// every version in {ns}:gc in the background; Close bounds how long it is
// waited for, and the next Prepare or Publish resumes what is left.
func (s *Sink) startGC(current string) {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.isClosed.Load() {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.gcMu.Lock()
		defer s.gcMu.Unlock()
		ctx := s.bgCtx
		err := ctx.Err()
		if err == nil && current != "" {
			err = s.expire(ctx, current)
		}
		if err == nil {
			err = s.collect(ctx)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Error("redis retention cleanup failed; the next run retries", "err", err)
		}
	}()
}

// collect deletes the keys of the versions listed in {ns}:gc, then the
// list entries themselves.
func (s *Sink) collect(ctx context.Context) error {
	ns := s.cfg.namespace
	vs, err := s.client.SMembers(ctx, gcKey(ns)).Result()
	if err != nil {
		return s.cfg.sanitize("retention: read "+gcKey(ns), err)
	}
	for _, v := range vs {
		if ValidVersion(v) != nil {
			s.log.Warn("redis gc: skipping malformed version", "version", v)
			continue
		}
		start := time.Now()
		n, err := s.deleteVersion(ctx, v)
		if err != nil {
			return err
		}
		if err := s.client.SRem(ctx, gcKey(ns), v).Err(); err != nil {
			return s.cfg.sanitize("retention: unmark "+v, err)
		}
		s.log.Info("redis version deleted", "version", v, "keys", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// WaitCleanup waits for background retention cleanup to finish, or ctx.
func (s *Sink) WaitCleanup(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// versionState is what a version left in Redis: its key record and its
// shard-marker hash (Prepare creates the hash before anything is written;
// every pipeline APPENDs its keys to the record before its SETs).
type versionState struct {
	recorded, marked bool
}

// queueVersionState adds the two EXISTS that read a version's state to
// pipe; read reads their answers once the pipeline ran.
func (s *Sink) queueVersionState(ctx context.Context, pipe goredis.Pipeliner, version string) (read func() (versionState, error)) {
	rec := pipe.Exists(ctx, s.layout.Keys(version))
	mark := pipe.Exists(ctx, s.layout.Shards(version))
	return func() (versionState, error) {
		if err := rec.Err(); err != nil {
			return versionState{}, s.cfg.sanitize("delete version "+version+": EXISTS "+s.layout.Keys(version), err)
		}
		if err := mark.Err(); err != nil {
			return versionState{}, s.cfg.sanitize("delete version "+version+": EXISTS "+s.layout.Shards(version), err)
		}
		return versionState{recorded: rec.Val() > 0, marked: mark.Val() > 0}, nil
	}
}

// deleteVersion removes every record of version, its key record and its
// shard markers (see deleteKnown); it reads their state first, one round
// trip.
func (s *Sink) deleteVersion(ctx context.Context, version string) (int64, error) {
	pipe := s.client.Pipeline()
	read := s.queueVersionState(ctx, pipe, version)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	st, err := read()
	if err != nil {
		return 0, err
	}
	return s.deleteKnown(ctx, version, st)
}

// deleteKnown removes every record of version, its key record and its
// shard markers, given their state. It reads the key record
// ({ns}:keys:{version}) and UNLINKs what it lists in batches, so its cost
// is proportional to the version, never to the keyspace, and a version
// with neither a key record nor markers costs nothing more: nothing was
// written (Prepare creates the markers before any write, and every
// pipeline records its keys before it sends them). A precog older than
// key records (before 2026-11-23) wrote neither: such a version is
// deleted by a SCAN of the whole keyspace only when the operator asked
// for it (ScanUnindexed: precog cancel --scan-unindexed); otherwise it is
// logged and left, as its records expire with their TTL.
func (s *Sink) deleteKnown(ctx context.Context, version string, st versionState) (int64, error) {
	var n int64
	var err error
	switch {
	case st.recorded:
		n, err = s.unlinkRecorded(ctx, version)
	case st.marked: // prepared, nothing sent
	case s.scanUnindexed.Load():
		s.log.Warn("redis version has no key record and no shard markers: deleting what an older precog may have written with a SCAN of the whole keyspace, as asked",
			"version", version)
		n, err = s.scanDelete(ctx, version)
	default:
		s.log.Info("redis version has no key record and no shard markers: nothing of it to delete (a version written by a precog older than key records is deleted only with precog cancel --scan-unindexed)",
			"version", version)
		return 0, nil
	}
	if err != nil {
		return n, err
	}
	// The record and markers go last: a crash before leaves them for the
	// next attempt, which then finds nothing left to delete but themselves.
	if err := s.client.Unlink(ctx, s.layout.Keys(version)).Err(); err != nil {
		return n, s.cfg.sanitize("delete version "+version+": UNLINK "+s.layout.Keys(version), err)
	}
	if err := s.client.Unlink(ctx, s.layout.Shards(version)).Err(); err != nil {
		return n, s.cfg.sanitize("delete version "+version+": UNLINK "+s.layout.Shards(version), err)
	}
	return n, nil
}

// ScanUnindexed makes Abort and retention delete a version that has
// neither a key record nor shard markers with a SCAN of the whole
// keyspace (on every master), for versions written by a precog older
// than key records. Off by default: without it such a version costs one
// round trip and is left to its TTL, so a cancel never scans a shared
// keyspace unasked.
func (s *Sink) ScanUnindexed(on bool) { s.scanUnindexed.Store(on) }

// unlinkRecorded reads the version's key record a chunk at a time and
// UNLINKs the keys it lists in batches of unlinkBatch. It returns the number
// of keys named (a retried pipeline records its keys twice; UNLINK of a
// missing key is harmless).
func (s *Sink) unlinkRecorded(ctx context.Context, version string) (int64, error) {
	keysKey, prefix := s.layout.Keys(version), s.layout.RecordPrefix(version)
	var total int64
	var carry []byte
	batch := make([]string, 0, unlinkBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.unlinkKeys(ctx, batch)
		total += int64(len(batch))
		batch = batch[:0]
		return err
	}
	for off := int64(0); ; off += keyRecordChunk {
		chunk, err := s.client.GetRange(ctx, keysKey, off, off+keyRecordChunk-1).Bytes()
		if err != nil {
			return total, s.cfg.sanitize(fmt.Sprintf("delete version %s: GETRANGE %s %d", version, keysKey, off), err)
		}
		buf := append(carry, chunk...)
		for {
			klen, n := binary.Uvarint(buf)
			if n <= 0 || uint64(len(buf)-n) < klen {
				break // an entry continues in the next chunk
			}
			batch = append(batch, prefix+string(buf[n:n+int(klen)]))
			buf = buf[n+int(klen):]
			if len(batch) == unlinkBatch {
				if err := flush(); err != nil {
					return total, s.cfg.sanitize("delete version "+version+": UNLINK", err)
				}
			}
		}
		carry = append([]byte(nil), buf...)
		if len(chunk) < keyRecordChunk {
			break
		}
	}
	if len(carry) > 0 {
		return total, fmt.Errorf("redis sink: delete version %s: key record %s ends in a truncated entry (%d bytes)", version, keysKey, len(carry))
	}
	if err := flush(); err != nil {
		return total, s.cfg.sanitize("delete version "+version+": UNLINK", err)
	}
	return total, nil
}

// forEachMaster calls fn with every master of a cluster (concurrently),
// or with the one server.
func (s *Sink) forEachMaster(ctx context.Context, fn func(context.Context, *goredis.Client) error) error {
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *goredis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unsupported client type %T", s.client)
}

// unlinkKeys deletes keys: one UNLINK on a single server, a pipeline of
// single-key UNLINKs on a cluster (keys of one batch span all slots).
func (s *Sink) unlinkKeys(ctx context.Context, keys []string) error {
	if _, ok := s.client.(*goredis.ClusterClient); !ok {
		return s.client.Unlink(ctx, keys...).Err()
	}
	pipe := s.client.Pipeline()
	for _, k := range keys {
		pipe.Unlink(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// scanDelete removes {ns}:{version}:* with SCAN + pipelined UNLINK, a page
// at a time, on every master of a cluster: for versions without a key
// record, only when ScanUnindexed asked for it.
func (s *Sink) scanDelete(ctx context.Context, version string) (int64, error) {
	pattern := s.layout.RecordPrefix(version) + "*"
	var total int64
	var mu sync.Mutex
	scanNode := func(ctx context.Context, c *goredis.Client) error {
		n, err := scanUnlink(ctx, c, pattern)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	}
	err := s.forEachMaster(ctx, scanNode)
	if err != nil {
		return total, s.cfg.sanitize("delete keys "+pattern, err)
	}
	return total, nil
}

// scanUnlink deletes the keys matching pattern on one node, one SCAN page
// (about unlinkBatch keys) per UNLINK, so Redis never blocks long.
func scanUnlink(ctx context.Context, c *goredis.Client, pattern string) (int64, error) {
	var cursor uint64
	var total int64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, unlinkBatch).Result()
		if err != nil {
			return total, err
		}
		if len(keys) > 0 { // one key per UNLINK: a node's keys span slots
			pipe := c.Pipeline()
			for _, k := range keys {
				pipe.Unlink(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return total, err
			}
			total += int64(len(keys))
		}
		if next == 0 {
			return total, nil
		}
		cursor = next
	}
}

// leftForNextRun lists the versions still waiting for deletion (for the
// log line of a Close that cut cleanup off).
func (s *Sink) leftForNextRun() []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	vs, err := s.client.SMembers(ctx, s.layout.GC()).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return []string{"(unknown: " + redact(err.Error(), s.cfg.password) + ")"}
	}
	return vs
}
