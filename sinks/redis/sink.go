// Package redis is the Redis sink: predictions as JSON records that online
// applications (and precog's lookup API) read by key.
//
// # Layout (contract 2 of docs/contracts.md)
//
// Layout (layout.go) is the one definition of every key; readers import it.
// With publish: atomic (the default) a run writes every record to
//
//	{namespace}:{version}:{key}   a JSON object: every output field, model_version,
//	                              computed_at (RFC 3339, UTC) and the run's params
//
// and the protocol of package sinks around it:
//
//	Lock      {ns}:lock: SET NX PX with the holder and a token, renewed every
//	          ttl/3 by a compare-and-extend script; Release deletes it only
//	          if the token still matches
//	Shard     records the servers' run_id and evicted_keys (INFO) before the
//	          first write; every pipeline also APPENDs its keys to the key
//	          record {ns}:keys:{version}
//	Commit    once every pipeline is acknowledged, writes the shard's marker
//	          (rows, server state) into the hash {ns}:shards:{version}
//	Stage     checks each committed shard's marker and row count, and that no
//	          server restarted or evicted keys since the shard started:
//	          anything wrong is a *sinks.MissingError listing the shards
//	Publish   ZADD NX {ns}:versions, then one SET of {ns}:current (the
//	          cutover), then {ns}:meta and a PUBLISH on {ns}:published so
//	          that caches (the lookup API) refresh at once
//
// The key column is not repeated inside the JSON object: it is the last
// part of the Redis key. Markers and key records carry the data's TTL.
//
// The version is added to {namespace}:versions before current moves, so a
// current version is always listed and retention never deletes it. Versions
// beyond Retain move to {namespace}:gc before they leave the list, and a
// background collector deletes their keys: it reads the version's key
// record and UNLINKs what it lists in batches of a thousand, so deleting a
// version costs in proportion to the version, not the keyspace. Versions
// with neither a key record nor shard markers hold nothing precog wrote
// since key records exist: deleting one costs one round trip; SCAN MATCH +
// UNLINK (for a version of an older precog) runs only when asked
// (ScanUnindexed). Close waits for the collector at most
// CloseTimeout; the next run's Prepare or Publish finishes what is left.
//
// With publish: in_place records go to {namespace}:{key} directly, a retried
// shard simply overwrites its keys, readers see each key change as it is
// written (no atomicity), Abort cannot undo writes, and there is nothing to
// roll back to; Publish only records {namespace}:meta and sends the notice.
// Stage checks markers and server state as in atomic mode; no key record
// is kept (records are never deleted by version). In this mode an entity
// key equal to "meta", "lock" or starting with "shards:" collides with the
// bookkeeping.
//
// # Writes
//
// Each shard writer encodes rows straight from Arrow into reused buffers and
// keeps up to pipeline_depth pipelines of pipeline_batch SETs in flight, each
// SET carrying the TTL (so a re-materialised key gets a fresh one). A
// pipeline that fails transiently (connection reset or EOF, timeouts,
// LOADING, READONLY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN) is re-sent whole
// with exponential backoff; SET is idempotent, so nothing is lost or doubled
// (a re-sent key record entry only names a key twice).
//
// # Redis Cluster
//
// Several addrs select go-redis's cluster client. Record keys spread over
// all slots; current, versions, gc, meta, markers and key records hash to
// different slots, which is why publish uses no multi-key command: the
// single SET of current is the cutover, and the ordering above keeps the
// bookkeeping safe. Server state (run_id, evicted_keys) is read from every
// master and compared by address at Stage. Deletion UNLINKs one key per
// command (pipelined); the SCAN fallback, when asked for, runs on every
// master. A pipeline's key record APPEND is acknowledged before its SETs
// are sent (they go to other nodes, in parallel), so that no written key
// escapes the record when a process dies mid-pipeline.
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
// cleanup before cancelling it, so that cleanup never holds a command's
// exit; the next run's Prepare or Publish resumes what is left.
const CloseTimeout = 2 * time.Second

// Sink writes runs to one Redis server or cluster. It is safe for
// concurrent use by several shard writers.
type Sink struct {
	cfg    config
	layout Layout
	client goredis.UniversalClient
	log    *slog.Logger
	retry  retryPolicy
	// lockTTL is the lease of Lock (DefaultLockTTL; shorter in tests).
	lockTTL time.Duration
	// closeWait is how long Close waits for cleanup (CloseTimeout).
	closeWait time.Duration

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	bgMu     sync.Mutex // orders startGC's bg.Add before Close's bg.Wait
	gcMu     sync.Mutex // one collector at a time
	closed   sync.Once
	isClosed atomic.Bool
	// scanUnindexed: see ScanUnindexed.
	scanUnindexed atomic.Bool

	// batches recycles pipeline batches across shard attempts.
	batches *batchPool

	activeMu sync.Mutex
	active   map[shardID]*shardWriter // open attempts, by run version and shard
	locks    map[*redisLock]bool      // held locks, released at Close
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
		batches:   newBatchPool(2*cfg.depth + 1),
		cfg:       cfg,
		layout:    Layout{Namespace: cfg.namespace, InPlace: cfg.publish == jobs.RedisPublishInPlace},
		lockTTL:   DefaultLockTTL,
		closeWait: CloseTimeout,
		client:    cfg.newClient(),
		log:       logger().With("addr", cfg.where(), "namespace", cfg.namespace),
		retry:     defaultRetry,
		active:    map[shardID]*shardWriter{},
		locks:     map[*redisLock]bool{},
		bgCtx:     ctx,
		bgCancel:  cancel,
	}, nil
}

// Name is "redis".
func (s *Sink) Name() string { return "redis" }

// Client exposes the sink's connection pool (for the lookup API and
// tests that read back what was written).
func (s *Sink) Client() goredis.UniversalClient { return s.client }

// Layout is where this sink's keys live.
func (s *Sink) Layout() Layout { return s.layout }

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

// Prepare checks the run's schema and version and that Redis is reachable,
// creates the version's shard-marker hash (whose existence tells cleanup
// that the version keeps a key record), and resumes any retention cleanup
// an earlier run left unfinished, in the background.
func (s *Sink) Prepare(ctx context.Context, run sinks.RunInfo) error {
	if err := s.checkRun(run); err != nil {
		return err
	}
	if _, err := newRecordEncoder(run.Schema, run.Key); err != nil {
		return fmt.Errorf("redis sink: %w", err)
	}
	if err := s.Ping(ctx); err != nil {
		return err
	}
	if s.layout.InPlace {
		return nil
	}
	key := s.layout.Shards(run.Version)
	pipe := s.client.Pipeline()
	pipe.HSet(ctx, key, "format", 1, EncodingField, s.cfg.encoding)
	if s.cfg.ttl > 0 {
		pipe.PExpire(ctx, key, s.cfg.ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.cfg.sanitize("prepare: create "+key, err)
	}
	s.startGC("")
	return nil
}

func (s *Sink) checkRun(run sinks.RunInfo) error {
	if s.cfg.publish == jobs.RedisPublishAtomic {
		if err := ValidVersion(run.Version); err != nil {
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
	if err == nil {
		err = enc.setEncoding(s.cfg.encoding)
	}
	if err != nil {
		return nil, fmt.Errorf("redis sink: shard %d: %w", index, err)
	}
	// The servers' state before the first write goes into the commit
	// marker: Stage compares it to detect a restart or evictions since.
	nodes, err := s.nodeStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", index, err)
	}
	w := newShardWriter(s, run, index, enc, nodes)
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

// Publish is phase two: one SET of {ns}:current makes the staged run
// current (atomic mode), then the run is announced and versions beyond
// retention are deleted in the background. Publishing the current version
// again is a no-op cutover.
//
// The version is added to {ns}:versions (ZADD NX) just before the SET, not
// at Stage: the list is what Rollback offers, and a staged run that another
// sink then refuses must never become a rollback target. The ZADD goes to
// the same server as the SET and changes nothing readers see, so it adds
// no failure that leaves anything half visible. Once the SET succeeded,
// Publish succeeds: a failed notice or meta update is logged (readers poll
// current too), and retention runs later.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	if s.isClosed.Load() {
		return fmt.Errorf("redis sink %s: publish after Close", s.cfg.where())
	}
	if err := s.checkRun(run); err != nil {
		return err
	}
	l := s.layout
	now := time.Now().UTC()
	if !l.InPlace {
		done, err := s.cutover(ctx, run.Version)
		if err != nil || done {
			return err
		}
		if err := s.client.ZAddNX(ctx, l.Versions(), goredis.Z{Score: float64(now.UnixMilli()), Member: run.Version}).Err(); err != nil {
			return s.cfg.sanitize("publish: list version "+run.Version, err)
		}
	}
	s.log.Info("redis run published", "version", run.Version, "run", run.RunID, "mode", s.cfg.publish)
	s.announce(ctx, run.Version, now)
	if l.InPlace {
		// In place, the markers served Stage only: records are not
		// deleted by version.
		if err := s.client.Unlink(ctx, l.Shards(run.Version)).Err(); err != nil {
			s.log.Warn("redis in_place: could not delete the run's shard markers; they expire with the TTL", "key", l.Shards(run.Version), "err", s.cfg.sanitize("unlink", err))
		}
		return nil
	}
	s.startGC(run.Version)
	return nil
}

// casCurrentScript sets {ns}:current to ARGV[1] unless it names a later
// version (jobs.Version.CreatedAfter, written again in Lua: the time parts
// in byte order), in one step: it returns "" when set, else the later version it
// found. One key, so it works on Redis Cluster too.
var casCurrentScript = goredis.NewScript(`
local function stamp(v)
  local i = string.find(v, '-', 1, true)
  if i then return string.sub(v, 1, i - 1) end
  return v
end
local function later(a, b)
  a, b = stamp(a), stamp(b)
  for i = 1, math.min(#a, #b) do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local cur = redis.call('GET', KEYS[1])
if cur and later(cur, ARGV[1]) then
  return cur
end
redis.call('SET', KEYS[1], ARGV[1])
return ''`)

// cutover moves {ns}:current to version under sinks.CheckPublishOrder. done
// reports a version published before (listed in {ns}:versions): left as it
// is, so a retried publish never undoes a later publish or a rollback.
// current is set before the version is listed, so a publish cut off in
// between is completed by its retry.
func (s *Sink) cutover(ctx context.Context, version string) (done bool, err error) {
	l := s.layout
	listed, err := s.client.ZRange(ctx, l.Versions(), 0, -1).Result()
	if err != nil {
		return false, s.cfg.sanitize("publish: read "+l.Versions(), err)
	}
	latest := ""
	for _, v := range listed {
		if v == version {
			s.log.Info("redis version published before; left as it is", "version", version)
			return true, nil
		}
		latest = jobs.LatestVersion(latest, v)
	}
	if err := sinks.CheckPublishOrder("redis "+s.cfg.namespace, version, latest); err != nil {
		return false, err
	}
	later, err := casCurrentScript.Run(ctx, s.client, []string{l.Current()}, version).Text()
	if err != nil {
		return false, s.cfg.sanitize("publish: set "+l.Current(), err)
	}
	if later != "" {
		return false, sinks.CheckPublishOrder("redis "+s.cfg.namespace, version, later)
	}
	return false, nil
}

// announce records {ns}:meta and sends the published notice; failures are
// logged, since the cutover has already happened.
func (s *Sink) announce(ctx context.Context, version string, at time.Time) {
	if err := s.writeMeta(ctx, version, at); err != nil {
		s.log.Warn("redis publish: meta not updated", "err", err)
	}
	if err := s.notify(ctx, version); err != nil {
		s.log.Warn("redis publish: notice not sent; readers see the new version at their next poll", "err", err)
	}
}

func (s *Sink) writeMeta(ctx context.Context, version string, at time.Time) error {
	enc, err := s.VersionEncoding(ctx, version)
	if err != nil {
		return err
	}
	err = s.client.HSet(ctx, metaKey(s.cfg.namespace), "version", version,
		"published_at", at.Format(time.RFC3339Nano), "mode", string(s.cfg.publish), EncodingField, enc).Err()
	return s.cfg.sanitize("publish: write "+metaKey(s.cfg.namespace), err)
}

// VersionEncoding is the record encoding of version as recorded in its
// Shards hash (EncodingJSON when not recorded: written before encodings
// existed). With publish: in_place there are no versions: the sink's own
// encoding.
func (s *Sink) VersionEncoding(ctx context.Context, version string) (string, error) {
	if s.layout.InPlace {
		return s.cfg.encoding, nil
	}
	enc, err := s.client.HGet(ctx, s.layout.Shards(version), EncodingField).Result()
	if errors.Is(err, goredis.Nil) {
		return EncodingJSON, nil
	}
	if err != nil {
		return "", s.cfg.sanitize("read the encoding of version "+version, err)
	}
	return enc, nil
}

func (s *Sink) notify(ctx context.Context, version string) error {
	return s.cfg.sanitize("publish notice on "+Channel(s.cfg.namespace),
		s.client.Publish(ctx, Channel(s.cfg.namespace), version).Err())
}

// Abort deletes everything an unpublished atomic run wrote. It refuses a
// published version (use Rollback). In in_place mode writes cannot be
// undone; Abort logs that and returns nil.
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	if s.layout.InPlace {
		s.log.Warn("redis in_place run aborted: keys already written stay (in_place has no atomicity)", "run", run.RunID)
		if err := s.client.Unlink(ctx, s.layout.Shards(run.Version)).Err(); err != nil {
			return s.cfg.sanitize("abort: delete "+s.layout.Shards(run.Version), err)
		}
		return nil
	}
	if err := s.checkRun(run); err != nil {
		return err
	}
	// One round trip reads whether the version is published and what it
	// left: a run that wrote nothing costs this alone.
	ns := s.cfg.namespace
	pipe := s.client.Pipeline()
	curCmd := pipe.Get(ctx, CurrentKey(ns))
	listedCmd := pipe.ZScore(ctx, VersionsKey(ns), run.Version)
	read := s.queueVersionState(ctx, pipe, run.Version)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	cur, err := curCmd.Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return s.cfg.sanitize("abort: read "+CurrentKey(ns), err)
	}
	_, err = listedCmd.Result()
	listed := err == nil
	if err != nil && !errors.Is(err, goredis.Nil) {
		return s.cfg.sanitize("abort: read "+VersionsKey(ns), err)
	}
	if cur == run.Version || listed {
		return fmt.Errorf("redis sink: abort run %s: version %s is published; roll back instead", run.RunID, run.Version)
	}
	st, err := read()
	if err != nil {
		return fmt.Errorf("abort run %s: %w", run.RunID, err)
	}
	n, err := s.deleteKnown(ctx, run.Version, st)
	if err != nil {
		return fmt.Errorf("abort run %s: %w", run.RunID, err)
	}
	s.log.Info("redis run aborted", "version", run.Version, "keys_deleted", n)
	return nil
}

// Versions lists the retained published versions, newest first.
func (s *Sink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	if s.cfg.publish == jobs.RedisPublishInPlace {
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
	if s.cfg.publish == jobs.RedisPublishInPlace {
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
	if s.cfg.publish == jobs.RedisPublishInPlace {
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

// Close waits up to CloseTimeout for background cleanup, then cancels it
// and logs the versions left for the next run (whose Prepare or Publish
// resumes them), stops renewing any lock still held, and closes the
// connections. Cleanup therefore never holds a command's exit for long.
func (s *Sink) Close() error {
	var err error
	s.closed.Do(func() {
		s.bgMu.Lock()
		s.isClosed.Store(true)
		s.bgMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.closeWait)
		if s.WaitCleanup(ctx) != nil {
			s.bgCancel()
			s.bg.Wait()
			s.log.Warn("redis retention cleanup cut off at close; the next run finishes it",
				"waited", s.closeWait, "versions_left", s.leftForNextRun())
		}
		cancel()
		s.bgCancel()
		s.bg.Wait()
		s.releaseLocks()
		if cerr := s.client.Close(); cerr != nil {
			err = fmt.Errorf("redis %s: close: %s", s.cfg.where(), redact(cerr.Error(), s.cfg.password))
		}
	})
	return err
}
