// Package redis is the Redis sink: predictions as JSON records that online
// applications (and precog's lookup API) read by key.
//
// # Layout (contract 2 of DESIGN.md)
//
// With publish: atomic (the default) a run writes every record to
//
//	{namespace}:{version}:{key}   a JSON object: every output field, model_version,
//	                              computed_at (RFC 3339, UTC) and the run's params
//
// and, once every shard is committed, Publish cuts readers over with one SET:
//
//	{namespace}:current    the published version (readers GET it first)
//	{namespace}:versions   sorted set of retained published versions, score = publish time (ms)
//	{namespace}:gc         set of versions whose keys are being deleted
//	{namespace}:meta       hash: version, published_at, mode (informational)
//
// and PUBLISHes the version on channel {namespace}:published so that caches
// (the lookup API) refresh at once. The key column is not repeated inside
// the JSON object: it is the last part of the Redis key.
//
// The version is added to {namespace}:versions before current moves, so a
// current version is always listed and retention never deletes it. Versions
// beyond Retain move to {namespace}:gc before they leave the list, and a
// background collector deletes their keys with SCAN MATCH + UNLINK in
// batches of about a thousand keys (never KEYS, never one giant DEL); a
// collector interrupted by a crash resumes at the next Publish.
//
// With publish: in_place records go to {namespace}:{key} directly, a retried
// shard simply overwrites its keys, readers see each key change as it is
// written (no atomicity), Abort cannot undo writes, and there is nothing to
// roll back to; Publish only records {namespace}:meta and sends the notice.
// In this mode an entity key equal to "meta" collides with the metadata.
//
// # Writes
//
// Each shard writer encodes rows straight from Arrow into reused buffers and
// keeps up to pipeline_depth pipelines of pipeline_batch SETs in flight, each
// SET carrying the TTL (so a re-materialised key gets a fresh one). A
// pipeline that fails transiently (connection reset or EOF, timeouts,
// LOADING, READONLY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN) is re-sent whole
// with exponential backoff; SET is idempotent, so nothing is lost or doubled.
//
// # Redis Cluster
//
// Several addrs select go-redis's cluster client. Record keys spread over
// all slots; current, versions, gc and meta hash to different slots, which
// is why publish uses no multi-key command: the single SET of current is the
// cutover, and the ordering above keeps the bookkeeping safe. SCAN runs on
// every master and UNLINK goes one key per command (pipelined).
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// CloseTimeout bounds how long Close waits for background retention
// cleanup before cancelling it; the next Publish resumes what is left.
const CloseTimeout = 30 * time.Second

// scanCount is the COUNT hint of cleanup SCANs and so the size of one
// UNLINK pipeline.
const scanCount = 1000

// Key layout, shared with readers such as the lookup API.

// CurrentKey holds the published version of namespace.
func CurrentKey(namespace string) string { return namespace + ":current" }

// VersionsKey is the sorted set of retained published versions.
func VersionsKey(namespace string) string { return namespace + ":versions" }

// Channel is the pub/sub channel on which Publish and Rollback announce the
// new current version (the message is the version).
func Channel(namespace string) string { return namespace + ":published" }

// RecordKey is where a record lives: {ns}:{version}:{key} for atomic
// publish, {ns}:{key} for in_place (version "").
func RecordKey(namespace, version, key string) string {
	if version == "" {
		return namespace + ":" + key
	}
	return namespace + ":" + version + ":" + key
}

func gcKey(ns string) string   { return ns + ":gc" }
func metaKey(ns string) string { return ns + ":meta" }

// Sink writes runs to one Redis server or cluster. It is safe for
// concurrent use by several shard writers.
type Sink struct {
	cfg    config
	client goredis.UniversalClient
	log    *slog.Logger
	retry  retryPolicy

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	gcMu     sync.Mutex // one collector at a time
	closed   sync.Once
	isClosed atomic.Bool

	activeMu sync.Mutex
	active   map[shardID]*shardWriter // open attempts, by run version and shard
}

// shardID names a shard of a run.
type shardID struct {
	version string
	index   int
}

var (
	_ sinks.Sink       = (*Sink)(nil)
	_ sinks.Rollbacker = (*Sink)(nil)
)

// New validates the spec (applying defaults) and creates the client; it
// does not connect: Prepare checks reachability.
func New(spec jobs.RedisSinkSpec) (*Sink, error) {
	cfg, err := newConfig(spec)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Sink{
		cfg:      cfg,
		client:   cfg.newClient(),
		log:      logger().With("addr", cfg.where(), "namespace", cfg.namespace),
		retry:    defaultRetry,
		active:   map[shardID]*shardWriter{},
		bgCtx:    ctx,
		bgCancel: cancel,
	}, nil
}

// Name is "redis".
func (s *Sink) Name() string { return "redis" }

// Client exposes the sink's connection pool (for the lookup API and
// tests that read back what was written).
func (s *Sink) Client() goredis.UniversalClient { return s.client }

func (s *Sink) keyPrefix(version string) string {
	if s.cfg.publish == PublishInPlace {
		return s.cfg.namespace + ":"
	}
	return s.cfg.namespace + ":" + version + ":"
}

// Ping checks that the server answers and the credentials are accepted.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return s.cfg.sanitize("ping", err)
	}
	return nil
}

// Check implements sinks.Checker for `precog validate`: Redis answers PING
// with the configured credentials.
func (s *Sink) Check(ctx context.Context) error { return s.Ping(ctx) }

// Prepare checks the run's schema and version and that Redis is reachable.
func (s *Sink) Prepare(ctx context.Context, run sinks.RunInfo) error {
	if err := s.checkRun(run); err != nil {
		return err
	}
	if _, err := newRecordEncoder(run.Schema, run.Key); err != nil {
		return fmt.Errorf("redis sink: %w", err)
	}
	return s.Ping(ctx)
}

func (s *Sink) checkRun(run sinks.RunInfo) error {
	if s.cfg.publish == PublishAtomic {
		if err := validVersion(run.Version); err != nil {
			return fmt.Errorf("redis sink: run %s: %w", run.RunID, err)
		}
	}
	return nil
}

// Shard starts one attempt at writing shard index.
func (s *Sink) Shard(ctx context.Context, run sinks.RunInfo, index int) (sinks.ShardWriter, error) {
	if err := s.checkRun(run); err != nil {
		return nil, err
	}
	enc, err := newRecordEncoder(run.Schema, run.Key)
	if err != nil {
		return nil, fmt.Errorf("redis sink: shard %d: %w", index, err)
	}
	w := newShardWriter(s, run, index, enc)
	// An earlier attempt of this shard in this process (abandoned by its
	// caller) is discarded first: its pipelines in flight must not land
	// after this attempt's writes of the same keys.
	s.activeMu.Lock()
	prev := s.active[w.id]
	s.active[w.id] = w
	s.activeMu.Unlock()
	if prev != nil {
		prev.Abort(ctx)
	}
	return w, nil
}

// release forgets a finished attempt.
func (s *Sink) release(w *shardWriter) {
	s.activeMu.Lock()
	if s.active[w.id] == w {
		delete(s.active, w.id)
	}
	s.activeMu.Unlock()
}

// Publish makes the run current (atomic mode: one SET of {ns}:current),
// announces it, and starts deleting versions beyond retention in the
// background. Publishing the current version again is a no-op cutover.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	if s.isClosed.Load() {
		return fmt.Errorf("redis sink %s: publish after Close", s.cfg.where())
	}
	if err := s.checkRun(run); err != nil {
		return err
	}
	ns := s.cfg.namespace
	now := time.Now().UTC()
	if s.cfg.publish == PublishInPlace {
		if err := s.writeMeta(ctx, run.Version, now); err != nil {
			return err
		}
		return s.notify(ctx, run.Version)
	}
	// Listed first, so that a current version is always a retained one.
	if err := s.client.ZAddNX(ctx, VersionsKey(ns), goredis.Z{Score: float64(now.UnixMilli()), Member: run.Version}).Err(); err != nil {
		return s.cfg.sanitize("publish: list version "+run.Version, err)
	}
	if err := s.client.Set(ctx, CurrentKey(ns), run.Version, 0).Err(); err != nil {
		return s.cfg.sanitize("publish: set "+CurrentKey(ns), err)
	}
	s.log.Info("redis run published", "version", run.Version, "run", run.RunID)
	if err := s.writeMeta(ctx, run.Version, now); err != nil {
		return err
	}
	if err := s.notify(ctx, run.Version); err != nil {
		return err
	}
	if err := s.expire(ctx, run.Version); err != nil {
		return err
	}
	s.startGC()
	return nil
}

func (s *Sink) writeMeta(ctx context.Context, version string, at time.Time) error {
	err := s.client.HSet(ctx, metaKey(s.cfg.namespace), "version", version,
		"published_at", at.Format(time.RFC3339Nano), "mode", s.cfg.publish).Err()
	return s.cfg.sanitize("publish: write "+metaKey(s.cfg.namespace), err)
}

func (s *Sink) notify(ctx context.Context, version string) error {
	return s.cfg.sanitize("publish notice on "+Channel(s.cfg.namespace),
		s.client.Publish(ctx, Channel(s.cfg.namespace), version).Err())
}

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

// startGC deletes the keys of every version in {ns}:gc in the background.
func (s *Sink) startGC() {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.gcMu.Lock()
		defer s.gcMu.Unlock()
		if err := s.collect(s.bgCtx); err != nil && s.bgCtx.Err() == nil {
			s.log.Error("redis retention cleanup failed; the next publish retries", "err", err)
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
		if validVersion(v) != nil {
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

// deleteVersion removes {ns}:{version}:* with SCAN + pipelined UNLINK, a
// page at a time, on every master of a cluster.
func (s *Sink) deleteVersion(ctx context.Context, version string) (int64, error) {
	pattern := s.cfg.namespace + ":" + version + ":*"
	var total int64
	var mu sync.Mutex
	scanNode := func(ctx context.Context, c *goredis.Client) error {
		n, err := scanUnlink(ctx, c, pattern)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
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
	if err != nil {
		return total, s.cfg.sanitize("delete keys "+pattern, err)
	}
	return total, nil
}

// scanUnlink deletes the keys matching pattern on one node, one SCAN page
// (about scanCount keys) per UNLINK pipeline, so Redis never blocks long.
func scanUnlink(ctx context.Context, c *goredis.Client, pattern string) (int64, error) {
	var cursor uint64
	var total int64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return total, err
		}
		if len(keys) > 0 {
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

// Abort deletes everything an unpublished atomic run wrote. It refuses a
// published version (use Rollback). In in_place mode writes cannot be
// undone; Abort logs that and returns nil.
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	if s.cfg.publish == PublishInPlace {
		s.log.Warn("redis in_place run aborted: keys already written stay (in_place has no atomicity)", "run", run.RunID)
		return nil
	}
	if err := s.checkRun(run); err != nil {
		return err
	}
	ns := s.cfg.namespace
	cur, err := s.client.Get(ctx, CurrentKey(ns)).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return s.cfg.sanitize("abort: read "+CurrentKey(ns), err)
	}
	_, err = s.client.ZScore(ctx, VersionsKey(ns), run.Version).Result()
	listed := err == nil
	if err != nil && !errors.Is(err, goredis.Nil) {
		return s.cfg.sanitize("abort: read "+VersionsKey(ns), err)
	}
	if cur == run.Version || listed {
		return fmt.Errorf("redis sink: abort run %s: version %s is published; roll back instead", run.RunID, run.Version)
	}
	n, err := s.deleteVersion(ctx, run.Version)
	if err != nil {
		return fmt.Errorf("abort run %s: %w", run.RunID, err)
	}
	s.log.Info("redis run aborted", "version", run.Version, "keys_deleted", n)
	return nil
}

// Versions lists the retained published versions, newest first.
func (s *Sink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	if s.cfg.publish == PublishInPlace {
		return nil, nil
	}
	vs, err := s.client.ZRevRange(ctx, VersionsKey(s.cfg.namespace), 0, -1).Result()
	if err != nil {
		return nil, s.cfg.sanitize("list versions", err)
	}
	return vs, nil
}

// Current returns the version readers see now ("" when none is published);
// after a rollback it is not the newest. The run is unused: the sink's
// namespace decides.
func (s *Sink) Current(ctx context.Context, _ sinks.RunInfo) (string, error) {
	cmd := s.client.Get(ctx, CurrentKey(s.cfg.namespace))
	if s.cfg.publish == PublishInPlace {
		cmd = s.client.HGet(ctx, metaKey(s.cfg.namespace), "version")
	}
	v, err := cmd.Result()
	if errors.Is(err, goredis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", s.cfg.sanitize("read "+CurrentKey(s.cfg.namespace), err)
	}
	return v, nil
}

// Rollback makes a retained version current again with one SET and
// announces it. A version not retained is an error listing those that are.
func (s *Sink) Rollback(ctx context.Context, run sinks.RunInfo, version string) error {
	if s.cfg.publish == PublishInPlace {
		return fmt.Errorf("redis sink: namespace %s uses publish: in_place, which keeps no earlier versions to roll back to", s.cfg.namespace)
	}
	vs, err := s.Versions(ctx, run)
	if err != nil {
		return err
	}
	found := false
	for _, v := range vs {
		found = found || v == version
	}
	if !found {
		return fmt.Errorf("redis sink: rollback of %s: version %q is not retained (retained, newest first: %s)",
			s.cfg.namespace, version, strings.Join(vs, ", "))
	}
	if err := s.client.Set(ctx, CurrentKey(s.cfg.namespace), version, 0).Err(); err != nil {
		return s.cfg.sanitize("rollback: set "+CurrentKey(s.cfg.namespace), err)
	}
	s.log.Info("redis rolled back", "version", version)
	if err := s.writeMeta(ctx, version, time.Now().UTC()); err != nil {
		return err
	}
	return s.notify(ctx, version)
}

// Close waits up to CloseTimeout for background cleanup (cancelling it
// after that; the next Publish resumes it) and closes the connections.
func (s *Sink) Close() error {
	var err error
	s.closed.Do(func() {
		s.isClosed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
		if s.WaitCleanup(ctx) != nil {
			s.log.Warn("redis retention cleanup still running at close; cancelled, resumes at the next publish")
		}
		cancel()
		s.bgCancel()
		s.bg.Wait()
		if cerr := s.client.Close(); cerr != nil {
			err = fmt.Errorf("redis %s: close: %s", s.cfg.where(), redact(cerr.Error(), s.cfg.password))
		}
	})
	return err
}
