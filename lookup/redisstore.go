package lookup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/jobs"
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
}

// redisConn is one client shared by the namespaces that use the same server.
type redisConn struct {
	client goredis.UniversalClient
	where  string
}

func redisConnKey(s *jobs.RedisSinkSpec) string {
	addrs := s.Addrs
	if len(addrs) == 0 {
		addrs = []string{s.Addr}
	}
	return fmt.Sprintf("%s|%d|%s|%s|%v", strings.Join(addrs, ","), s.DB, s.Username, s.Password, s.TLS)
}

// newRedisConn connects lazily. stepTimeout bounds a dial; reads, writes
// and pool waits are bounded by the caller's context (the store step's
// timeout when a later step can answer, else the request's), with
// requestTimeout as the backstop.
func newRedisConn(s *jobs.RedisSinkSpec, stepTimeout, requestTimeout time.Duration, poolSize int) *redisConn {
	addrs := s.Addrs
	if len(addrs) == 0 {
		addrs = []string{s.Addr}
	}
	opts := &goredis.UniversalOptions{
		Addrs:    addrs,
		DB:       s.DB,
		Username: s.Username,
		Password: s.Password,
		// A dead Redis must fail within the step timeout so the request
		// falls through to Postgres instead of waiting; a slow one is cut
		// by the step's context. A fixed read timeout as short as the step
		// would also cut the steps that have no fallback, turning hits
		// into failures whenever the machine is busy.
		DialTimeout:           stepTimeout,
		ReadTimeout:           requestTimeout,
		WriteTimeout:          requestTimeout,
		PoolTimeout:           requestTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              poolSize,
		MinIdleConns:          min(poolSize, 8),
	}
	if s.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &redisConn{client: goredis.NewUniversalClient(opts), where: strings.Join(addrs, ",")}
}

func (s *redisStore) recordKey(version, key string) string {
	if s.inPlace {
		return s.ns + ":" + key
	}
	return s.ns + ":" + version + ":" + key
}

func (s *redisStore) liveKey(version, key string) string {
	if version == "" {
		version = "-"
	}
	return s.ns + ":live:" + version + ":" + key
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
	v, err := s.conn.client.Get(ctx, s.ns+":current").Result()
	if errors.Is(err, goredis.Nil) {
		v, err = "", nil
	}
	if err != nil {
		return fmt.Errorf("redis %s: GET %s:current: %w", s.conn.where, s.ns, err)
	}
	if old := s.current.Load(); old == nil || *old != v {
		s.current.Store(&v)
	}
	return nil
}

// get fetches the records of keys: a nil entry is a miss. With writeback
// set, a miss on the versioned key is looked up under the live key in the
// same pipeline. live reports which hits came from a live write-back.
func (s *redisStore) get(ctx context.Context, keys []string, writeback bool) (recs [][]byte, live []bool, err error) {
	version, ok := s.version()
	recs = make([][]byte, len(keys))
	live = make([]bool, len(keys))
	if !ok && !writeback {
		return recs, live, nil
	}
	if len(keys) == 1 && (!writeback || !ok) {
		k := s.liveKey(version, keys[0])
		if ok {
			k = s.recordKey(version, keys[0])
		}
		b, err := s.conn.client.Get(ctx, k).Bytes()
		if errors.Is(err, goredis.Nil) {
			return recs, live, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("redis %s: GET %s: %w", s.conn.where, k, err)
		}
		recs[0], live[0] = b, !ok
		return recs, live, nil
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
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, nil, fmt.Errorf("redis %s: GET %d keys of %s: %w", s.conn.where, len(keys), s.ns, err)
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
	return recs, live, nil
}

// writeBack stores a live result under the live key with ttl.
func (s *redisStore) writeBack(ctx context.Context, key string, rec []byte, ttl time.Duration) error {
	version, _ := s.version()
	k := s.liveKey(version, key)
	if err := s.conn.client.Set(ctx, k, rec, ttl).Err(); err != nil {
		return fmt.Errorf("redis %s: SET %s: %w", s.conn.where, k, err)
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
			ch := s.ns + ":published"
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
