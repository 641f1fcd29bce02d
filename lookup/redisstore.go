package lookup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/runner/model"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// redisStore reads one namespace's records.
//
// Key layout (contract 2, publish: atomic): records under
// {ns}:{version}:{key}; {ns}:current names the published version and is
// cached here, refreshed on a message on {ns}:published and by a poll.
// publish: in_place reads {ns}:{key}.
//
// Live write-back: a live result is stored under {ns}:live:{version}:{key}
// with a short TTL, version being the published version current when it was
// computed ("-" before any publish). A reader checks it only after the
// versioned key misses, in the same round trip, and a later publish changes
// the version both keys are built from, so the batch record supersedes every
// earlier live result without anyone deleting it.
type redisStore struct {
	ns      string
	inPlace bool
	conn    *redisConn
	current atomic.Pointer[string] // nil: not known yet; "": nothing published
	curKey  atomic.Pointer[string] // {ns}:current once built (currentKey)
	// lost is the published version that vanished from Redis ({ns}:current
	// gone after it named a version: a restart without its data, a flush).
	// While set, every read of the namespace fails as unavailable instead
	// of answering "miss" for keys that were published a moment ago; the
	// next publish clears it.
	lost atomic.Pointer[string]
	// lostChecked is when a read last re-read {ns}:current while lost
	// (unix nanoseconds): reads recover on their own, at most one extra GET
	// per lostRecheck, even when the publish notice was missed.
	lostChecked atomic.Int64
	// onChange, when set, is called after the published version changed
	// from one known value to another (not at the first read).
	onChange func()
	// onLost, when set, is called once when the published version vanishes
	// (lost true) and once when a publish brings the namespace back.
	onLost func(version string, lost bool)
}

// redisConn is one client shared by the namespaces that use the same server.
type redisConn struct {
	client goredis.UniversalClient
	where  string
	// gets coalesces the single-key GETs of concurrent requests into one
	// MGET (automatic pipelining): while one round trip is in flight the
	// next requests queue and go out together, so under load the server
	// and redis-server make one read and one write syscall per batch
	// instead of per request; at low load a GET goes out alone at once.
	gets *model.Batcher[getReq, getRes]
	// sets coalesces live write-backs the same way: the results of
	// concurrent live answers go out as one pipeline of SETs instead of
	// a round trip each.
	sets *model.Batcher[setReq, struct{}]
	brk  *breaker
	// redact removes the connection's password from a message.
	redact func(string) string
}

// Coalescing limits: keys per MGET, and MGETs in flight at once. One in
// flight makes the largest batches; Redis runs commands one at a time
// anyway. Measured on 2 cores, 64 connections (GET hit QPS): no coalescing
// 28-30k, 16 in flight 27k, 4 in flight 33-34k, 2 in flight 36-38k, 1 in
// flight 39-44k.
const (
	coalesceMaxKeys  = 256
	coalesceInFlight = 1
)

// newRedisConn connects lazily, with the Redis sink's own parse of the
// spec's address (sinkredis.ParseConn: host:port or a redis:// URL with
// credentials and db, TLS, cluster addrs), so serve reaches the server the
// sink wrote to and names it, in every label, body and log line, without
// its password. stepTimeout bounds a dial; reads, writes and pool waits are
// bounded by the caller's context (the store step's timeout when a later
// step can answer, else the request's), with requestTimeout as the backstop.
func newRedisConn(rc sinkredis.Conn, stepTimeout, requestTimeout time.Duration, poolSize int) *redisConn {
	opts := rc.Options()
	opts.ClientName = "precog-serve"
	// A dead Redis must fail within the step timeout so the request falls
	// through to Postgres instead of waiting; a slow one is cut by the
	// step's context. A fixed read timeout as short as the step would also
	// cut the steps that have no fallback, turning hits into failures
	// whenever the machine is busy.
	opts.DialTimeout = stepTimeout
	opts.ReadTimeout = requestTimeout
	opts.WriteTimeout = requestTimeout
	opts.PoolTimeout = requestTimeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	// RESP2: the server reads records and pub/sub notices, nothing RESP3
	// adds; RESP3 makes every reply pass a push-notification check (5% of
	// the hit path's CPU in a profile).
	opts.Protocol = 2
	opts.PoolSize = poolSize
	opts.MinIdleConns = min(poolSize, 8)
	c := &redisConn{client: goredis.NewUniversalClient(opts), where: rc.Where(), redact: rc.Redact}
	c.gets = model.NewBatcher(coalesceMaxKeys, 0, c.mget,
		model.WithConcurrency(coalesceInFlight), model.WithQueue(4*coalesceMaxKeys*coalesceInFlight),
		// An MGET is bounded by the client's read timeout; watching every
		// caller's context to cancel it early cost more than it saved.
		model.WithoutCallerWatch())
	c.sets = model.NewBatcher(coalesceMaxKeys, 0, c.mset,
		model.WithConcurrency(coalesceInFlight), model.WithQueue(4*coalesceMaxKeys*coalesceInFlight),
		model.WithoutCallerWatch())
	return c
}

// setReq is one live write-back: a record stored under key for ttl.
type setReq struct {
	key string
	val []byte
	ttl time.Duration
}

// mset is the write-back coalescer's batch function: one pipeline of SETs,
// each with its TTL. A failed pipeline fails every write-back in it (a
// write-back is a cache fill: the caller counts the failure and moves on).
func (c *redisConn) mset(ctx context.Context, reqs []setReq) ([]struct{}, error) {
	cmds, err := c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, r := range reqs {
			p.Set(ctx, r.key, r.val, r.ttl)
		}
		return nil
	})
	if err == nil {
		for _, cmd := range cmds {
			if err = cmd.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return make([]struct{}, len(reqs)), nil
}

// getReq is one coalesced read: a record key and, when set, the
// namespace's {ns}:current key, read in the same MGET so that a miss is
// confirmed against the published version of the same instant without a
// round trip of its own. A batch reads each distinct current key once.
type getReq struct {
	key, current string
	// live, when set, is the key's live write-back key, read in the same
	// MGET: the answer when key misses.
	live string
}

// getRes answers a getReq: rec is nil for a missing key; cur is the value
// of the current key ("" when it is missing), valid when the request named
// one; live reports that rec is the live write-back (key missed).
type getRes struct {
	rec  []byte
	cur  string
	live bool
}

// mget is the coalescer's batch function: one MGET (one pipeline of GETs
// on a cluster, whose keys may live on several nodes) of the requests'
// keys, then their distinct current keys; a nil result is a missing key.
func (c *redisConn) mget(ctx context.Context, reqs []getReq) ([]getRes, error) {
	keys := make([]string, len(reqs), len(reqs)+1)
	var curs []string // distinct current keys, usually one
	var lives []int   // requests with a live key, whose keys follow theirs
	for i, r := range reqs {
		keys[i] = r.key
		if r.current != "" && !slices.Contains(curs, r.current) {
			curs = append(curs, r.current)
		}
		if r.live != "" {
			lives = append(lives, i)
		}
	}
	for _, i := range lives {
		keys = append(keys, reqs[i].live)
	}
	keys = append(keys, curs...)
	vals := make([][]byte, len(keys))
	if _, cluster := c.client.(*goredis.ClusterClient); cluster {
		cmds, err := c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range keys {
				p.Get(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, err
		}
		for i, cmd := range cmds {
			if b, err := cmd.(*goredis.StringCmd).Bytes(); err == nil {
				vals[i] = b
			}
		}
	} else {
		got, err := c.client.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		if len(got) != len(keys) {
			return nil, fmt.Errorf("MGET of %d keys answered %d values", len(keys), len(got))
		}
		for i, v := range got {
			if s, ok := v.(string); ok {
				vals[i] = []byte(s)
			}
		}
	}
	out := make([]getRes, len(reqs))
	for i, r := range reqs {
		out[i].rec = vals[i]
		if r.current != "" {
			out[i].cur = string(vals[len(reqs)+len(lives)+slices.Index(curs, r.current)])
		}
	}
	for j, i := range lives {
		if out[i].rec == nil {
			if v := vals[len(reqs)+j]; v != nil {
				out[i].rec, out[i].live = v, true
			}
		}
	}
	return out, nil
}

// errorf is fmt.Errorf with the connection's password removed from the
// message (the wrapped errors stay reachable for errors.Is and As).
func (c *redisConn) errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if c.redact == nil {
		return err
	}
	return &redactedError{msg: c.redact(err.Error()), err: err}
}

// redactedError shows a redacted message and wraps the original error.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return errors.Unwrap(e.err) }

// close stops the coalescers (queued GETs and write-backs still run) and
// the client.
func (c *redisConn) close() error {
	_ = c.gets.Close()
	_ = c.sets.Close()
	return c.client.Close()
}

// recordKey and liveKey name keys by the sink's layout, the one source of
// truth for what the sink writes and this store reads.
func (s *redisStore) recordKey(version, key string) string { return s.layout().Record(version, key) }

func (s *redisStore) liveKey(version, key string) string { return s.layout().Live(version, key) }

// currentKey is {ns}:current, built once: every read carries it.
func (s *redisStore) currentKey() string {
	if k := s.curKey.Load(); k != nil {
		return *k
	}
	k := s.layout().Current()
	s.curKey.Store(&k)
	return k
}

func (s *redisStore) layout() sinkredis.Layout {
	return sinkredis.Layout{Namespace: s.ns, InPlace: s.inPlace}
}

// version is the cached published version; ok is false when none is known
// (nothing published yet, or Redis not reached since start).
func (s *redisStore) version() (string, bool) {
	if s.inPlace {
		return "", true
	}
	v := s.current.Load()
	if v == nil || *v == "" {
		return "", false
	}
	return *v, true
}

// refresh re-reads {ns}:current.
func (s *redisStore) refresh(ctx context.Context) error {
	if s.inPlace {
		return nil
	}
	v, err := s.conn.client.Get(ctx, s.layout().Current()).Result()
	if errors.Is(err, goredis.Nil) {
		v, err = "", nil
	}
	if err != nil {
		return s.conn.errorf("redis %s: GET %s:current: %w", s.conn.where, s.ns, err)
	}
	s.observe(v)
	return nil
}

// observe takes a fresh read of {ns}:current: a version that disappeared
// marks the namespace lost (the cached version stays, so a republish of
// the same version reads as a recovery, not a change); any version clears
// that mark.
func (s *redisStore) observe(v string) {
	old := s.current.Load()
	if v == "" && old != nil && *old != "" {
		if s.lost.CompareAndSwap(nil, old) && s.onLost != nil {
			s.onLost(*old, true)
		}
		return
	}
	if v != "" {
		if was := s.lost.Swap(nil); was != nil && s.onLost != nil {
			s.onLost(*was, false)
		}
	}
	if old == nil || *old != v {
		s.current.Store(&v)
		if old != nil && s.onChange != nil {
			s.onChange()
		}
	}
}

// lostRecheck is how often reads of a lost namespace look for a new publish.
const lostRecheck = 100 * time.Millisecond

// lostVersion is the published version that vanished from Redis, "" when
// none did.
func (s *redisStore) lostVersion() string {
	if v := s.lost.Load(); v != nil {
		return *v
	}
	return ""
}

// errLost is the read error of a namespace whose published version
// vanished: unavailable (the next store or a 503 answers), never a miss.
func (s *redisStore) errLost(version string) error {
	return fmt.Errorf("redis %s: published version %s of %s is gone from Redis (restarted without its data, or flushed); it reads as unavailable until the next publish%w",
		s.conn.where, version, s.ns, noFault)
}

// get fetches the records of keys: a nil entry is a miss. With writeback
// set, a miss on the versioned key is looked up under the live key in the
// same pipeline. live reports which hits came from a live write-back.
//
// The read carries {ns}:current in the same round trip, so a miss is
// confirmed (contract 2: a Redis emptied by a restart reads as
// unavailable, a new publish is read again) without a GET of its own.
func (s *redisStore) get(ctx context.Context, keys []string, writeback bool) (recs [][]byte, live []bool, err error) {
	recs, live, version, cur, err := s.read(ctx, keys, writeback)
	if err != nil || s.inPlace || version == "" || !anyMissing(recs) {
		return asJSONRecords(recs), live, err
	}
	s.observe(cur)
	if lost := s.lostVersion(); lost != "" {
		return asJSONRecords(recs), live, s.errLost(lost)
	}
	if now, _ := s.version(); now == version {
		return asJSONRecords(recs), live, nil
	}
	recs, live, _, _, err = s.read(ctx, keys, writeback)
	return asJSONRecords(recs), live, err
}

// asJSONRecords turns every msgpack record (sinks.redis.encoding: msgpack)
// into the JSON object the JSON encoding stores for the same row, in place,
// so that the rest of the server deals with one form and a msgpack
// record's response equals a JSON one's. Records are self-describing, so a
// reader needs no per-version encoding (a rollback changes nothing here). A
// record that does not decode is left as it is: the caller's check treats
// it as corrupt, like malformed JSON.
func asJSONRecords(recs [][]byte) [][]byte {
	for i, r := range recs {
		if sinkredis.IsMsgpackRecord(r) {
			if js, err := sinkredis.AppendRecordJSON(make([]byte, 0, 3*len(r)), r); err == nil {
				recs[i] = js
			}
		}
	}
	return recs
}

// anyMissing reports a key that no record answered.
func anyMissing(recs [][]byte) bool {
	for _, r := range recs {
		if r == nil {
			return true
		}
	}
	return false
}

// read is one lookup of keys under the cached published version, which it
// returns ("" when none is published), with the value of {ns}:current read
// in the same round trip (when version is not "").
func (s *redisStore) read(ctx context.Context, keys []string, writeback bool) (recs [][]byte, live []bool, version, cur string, err error) {
	if lost := s.lostVersion(); lost != "" {
		now := time.Now().UnixNano()
		if last := s.lostChecked.Load(); now-last < int64(lostRecheck) || !s.lostChecked.CompareAndSwap(last, now) {
			return nil, nil, "", "", s.errLost(lost)
		}
		if err := s.refresh(ctx); err != nil {
			return nil, nil, "", "", err
		}
		if lost := s.lostVersion(); lost != "" {
			return nil, nil, "", "", s.errLost(lost)
		}
	}
	if !s.inPlace && s.current.Load() == nil {
		// Not "nothing published": Redis has not answered yet, so a key
		// may well exist. Failing the step keeps it from reading as a miss.
		return nil, nil, "", "", fmt.Errorf("redis %s: published version of %s not known yet (Redis not reached since start)%w", s.conn.where, s.ns, noFault)
	}
	version, ok := s.version()
	recs = make([][]byte, len(keys))
	live = make([]bool, len(keys))
	if !ok && !writeback {
		return recs, live, version, "", nil
	}
	curKey := ""
	if ok && !s.inPlace {
		curKey = s.currentKey()
	}
	if len(keys) == 1 {
		// One key, the hot path: through the coalescer, the record key
		// and with write-back its live key (or, before any publish, the
		// live key alone) in the same MGET as concurrent requests'.
		req := getReq{key: s.liveKey(version, keys[0]), current: curKey}
		if ok {
			req.key = s.recordKey(version, keys[0])
			if writeback {
				req.live = s.liveKey(version, keys[0])
			}
		}
		res, err := s.conn.gets.Do(ctx, req)
		if err != nil {
			return nil, nil, "", "", s.conn.errorf("redis %s: GET %s: %w", s.conn.where, req.key, err)
		}
		recs[0], live[0] = res.rec, res.live || (res.rec != nil && !ok)
		return recs, live, version, res.cur, nil
	}
	pipe := s.conn.client.Pipeline()
	main := make([]*goredis.StringCmd, len(keys))
	lives := make([]*goredis.StringCmd, len(keys))
	for i, k := range keys {
		if ok {
			main[i] = pipe.Get(ctx, s.recordKey(version, k))
		}
		if writeback {
			lives[i] = pipe.Get(ctx, s.liveKey(version, k))
		}
	}
	var curCmd *goredis.StringCmd
	if curKey != "" {
		curCmd = pipe.Get(ctx, curKey)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, nil, "", "", s.conn.errorf("redis %s: GET %d keys of %s: %w", s.conn.where, len(keys), s.ns, err)
	}
	for i := range keys {
		if main[i] != nil {
			if b, err := main[i].Bytes(); err == nil {
				recs[i] = b
				continue
			}
		}
		if lives[i] != nil {
			if b, err := lives[i].Bytes(); err == nil {
				recs[i], live[i] = b, true
			}
		}
	}
	if curCmd != nil {
		cur = curCmd.Val() // "" when missing
	}
	return recs, live, version, cur, nil
}

// writeBack stores a live result under the live key with ttl, in the
// next pipeline of write-backs.
func (s *redisStore) writeBack(ctx context.Context, key string, rec []byte, ttl time.Duration) error {
	version, _ := s.version()
	k := s.liveKey(version, key)
	if _, err := s.conn.sets.Do(ctx, setReq{key: k, val: rec, ttl: ttl}); err != nil {
		return s.conn.errorf("redis %s: SET %s: %w", s.conn.where, k, err)
	}
	return nil
}

// versionWatcher keeps every atomic namespace's current version fresh: a
// subscription to {ns}:published per connection, and a poll as the safety
// net for missed messages (pub/sub is fire-and-forget) and reconnects.
type versionWatcher struct {
	log    *slog.Logger
	poll   time.Duration
	byConn map[*redisConn][]*redisStore
	wg     sync.WaitGroup
}

func (w *versionWatcher) start(ctx context.Context, timeout time.Duration) {
	for conn, stores := range w.byConn {
		var channels []string
		byChannel := map[string]*redisStore{}
		for _, s := range stores {
			if s.inPlace {
				continue
			}
			ch := s.layout().Channel()
			channels = append(channels, ch)
			byChannel[ch] = s
		}
		if len(channels) == 0 {
			continue
		}
		w.wg.Add(2)
		go func() {
			defer w.wg.Done()
			w.subscribe(ctx, conn, channels, byChannel, timeout)
		}()
		go func() {
			defer w.wg.Done()
			w.pollLoop(ctx, stores, timeout)
		}()
	}
}

func (w *versionWatcher) subscribe(ctx context.Context, conn *redisConn, channels []string, byChannel map[string]*redisStore, timeout time.Duration) {
	// go-redis resubscribes on reconnect by itself; the poll covers the gap.
	ps := conn.client.Subscribe(ctx, channels...)
	defer ps.Close()
	msgs := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			s := byChannel[m.Channel]
			if s == nil {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 4*timeout)
			if err := s.refresh(rctx); err != nil {
				w.log.Warn("refresh after publish notice failed", "namespace", s.ns, "err", err)
			} else {
				w.log.Info("published version changed", "namespace", s.ns, "version", *s.current.Load())
			}
			cancel()
		}
	}
}

func (w *versionWatcher) pollLoop(ctx context.Context, stores []*redisStore, timeout time.Duration) {
	t := time.NewTicker(w.poll)
	defer t.Stop()
	failing := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, s := range stores {
			rctx, cancel := context.WithTimeout(ctx, 4*timeout)
			err := s.refresh(rctx)
			cancel()
			if err != nil && !failing[s.ns] {
				w.log.Warn("cannot refresh the published version; serving the cached one", "namespace", s.ns, "err", err)
			}
			failing[s.ns] = err != nil
		}
	}
}

func (w *versionWatcher) wait() { w.wg.Wait() }
