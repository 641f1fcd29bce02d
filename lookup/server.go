// Package lookup is the HTTP API in front of the stores a batch job fills:
// GET a precomputed prediction by key from Redis, fall back to the job's
// Postgres view, and on a miss compute it live with the job's own model,
// merging concurrent misses into batched inferences (contract 4 of docs/contracts.md).
package lookup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// Server serves the lookup API. It is an http.Handler; ListenAndServe runs
// it with graceful shutdown. Close releases its connections and models.
type Server struct {
	cfg      Config
	ns       map[string]*namespace
	names    []string
	getH     apiFunc
	postH    apiFunc
	nsH      apiFunc // GET /v1/namespaces/{namespace}
	metricsH http.Handler
	metrics  *metrics
	tokens   [][32]byte
	slots    chan struct{}

	redisConns []*redisConn
	pgPools    []*pgxpool.Pool
	watcher    *versionWatcher
	ctx        context.Context // ends at Close: background work stops
	stop       context.CancelFunc
	bg         sync.WaitGroup // breaker probes, model reloads
	closeOnce  sync.Once
}

// namespace is one job as the API serves it.
type namespace struct {
	name         string
	spec         *jobs.Spec
	redis        *redisStore
	writebackTTL time.Duration
	pg           *pgTable
	features     *pgTable
	// live is the live-inference model in service (nil: live off). A
	// publish that brings a new model version swaps in a new one; a
	// request loads it once and uses that one throughout.
	live     atomic.Pointer[live]
	reload   chan struct{} // a published version changed: check the model
	keys     keyCounters   // answered keys by source, resolved once
	lastWarn atomic.Int64  // unix ns of the last store-failure warning
}

// New loads the job specs and models, connects (lazily) to the stores and
// returns a server ready to serve. It fails on an invalid spec (naming the
// file and field), on a model that does not load, on two jobs claiming one
// namespace, and when no tokens are given without InsecureNoAuth.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	if len(cfg.Tokens) == 0 && !cfg.InsecureNoAuth {
		return nil, errors.New("lookup: no API tokens (set PRECOG_API_TOKENS or --tokens-file, or pass --insecure-no-auth to serve without authentication)")
	}
	specs := append([]*jobs.Spec(nil), cfg.Specs...)
	if cfg.JobsDir != "" {
		loaded, err := loadSpecs(cfg.JobsDir, cfg.Params)
		if err != nil {
			return nil, err
		}
		specs = append(specs, loaded...)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("lookup: no job specs to serve (jobs dir %q)", cfg.JobsDir)
	}
	s := &Server{
		cfg:     cfg,
		ns:      map[string]*namespace{},
		metrics: newMetrics(),
		slots:   make(chan struct{}, cfg.MaxInFlight),
	}
	for _, t := range cfg.Tokens {
		s.tokens = append(s.tokens, hashToken(t))
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if err := s.buildNamespaces(specs); err != nil {
		s.Close()
		return nil, err
	}
	s.startWatcher(s.ctx)
	s.warm()
	s.routes()
	return s, nil
}

func (s *Server) coldStart() coldStart {
	return coldStart{ctx: s.ctx, wg: &s.bg, timeout: s.cfg.ColdStartTimeout}
}

// warm starts every Postgres table's cold-start queries, so that the
// first requests find them done or under way.
func (s *Server) warm() {
	for _, name := range s.names {
		n := s.ns[name]
		for _, t := range []*pgTable{n.pg, n.features} {
			if t != nil {
				t.warm()
			}
		}
	}
}

func specName(spec *jobs.Spec) string {
	if spec.File != "" {
		return spec.File
	}
	return "job " + spec.Name
}

func (s *Server) buildNamespaces(specs []*jobs.Spec) error {
	redisConns := map[string]*redisConn{}
	pgPools := map[string]*pgxpool.Pool{}
	pgBreakers := map[*pgxpool.Pool]*breaker{}
	pool := func(dsn, where string) (*pgxpool.Pool, error) {
		if p, ok := pgPools[dsn]; ok {
			return p, nil
		}
		pc, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("%s: bad dsn: %w", where, err)
		}
		pc.MaxConns = s.cfg.PostgresMaxConns
		pc.ConnConfig.ConnectTimeout = max(s.cfg.StoreTimeout, time.Second)
		p, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		pgPools[dsn] = p
		s.pgPools = append(s.pgPools, p)
		cc := pc.ConnConfig
		pgBreakers[p] = s.newBreaker("postgres", fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database), p.Ping)
		return p, nil
	}
	for _, spec := range specs {
		file := specName(spec)
		n := &namespace{spec: spec, name: spec.Name}
		if r := spec.Sinks.Redis; r != nil {
			n.name = r.Namespace
			rc, err := sinkredis.ParseConn(*r)
			if err != nil {
				return fmt.Errorf("lookup: %s: %w", file, err)
			}
			ck := rc.Key()
			conn, ok := redisConns[ck]
			if !ok {
				conn = newRedisConn(rc, s.cfg.StoreTimeout, s.cfg.RequestTimeout, s.cfg.RedisPoolSize)
				conn.brk = s.newBreaker("redis", conn.where, func(ctx context.Context) error {
					if err := conn.client.Ping(ctx).Err(); err != nil {
						return conn.errorf("PING: %w", err)
					}
					return nil
				})
				redisConns[ck] = conn
				s.redisConns = append(s.redisConns, conn)
			}
			n.redis = &redisStore{ns: r.Namespace, inPlace: r.Publish == jobs.RedisPublishInPlace, conn: conn}
			n.redis.onLost = s.reportLost(n.name)
			n.writebackTTL = spec.Serving.WritebackTTL.Duration
		}
		if prev, dup := s.ns[n.name]; dup {
			return fmt.Errorf("lookup: %s and %s both serve namespace %q", specName(prev.spec), file, n.name)
		}
		if p := spec.Sinks.Postgres; p != nil {
			pl, err := pool(p.DSN, file+": sinks.postgres.dsn")
			if err != nil {
				return fmt.Errorf("lookup: %w", err)
			}
			n.pg = newPGTable(pl, p.Schema, p.Table, spec.Source.Key)
			n.pg.brk, n.pg.cold = pgBreakers[pl], s.coldStart()
		}
		if spec.Serving.Live == nil || *spec.Serving.Live {
			if err := s.loadLive(n, file); err != nil {
				return err
			}
			if n.redis != nil && !n.redis.inPlace {
				n.reload = make(chan struct{}, 1)
				n.redis.onChange = func() {
					select {
					case n.reload <- struct{}{}:
					default: // a check is already due
					}
				}
			}
			if f := spec.Serving.Features; f != nil {
				pl, err := pool(f.DSN, file+": serving.features.dsn")
				if err != nil {
					return fmt.Errorf("lookup: %w", err)
				}
				n.features = newPGTable(pl, "", f.Table, spec.Source.Key)
				n.features.brk, n.features.cold = pgBreakers[pl], s.coldStart()
			}
		}
		n.keys = s.metrics.keyCounters(n.name)
		s.ns[n.name] = n
		s.names = append(s.names, n.name)
	}
	sort.Strings(s.names)
	return nil
}

func (s *Server) loadLive(n *namespace, file string) error {
	m, l, err := s.loadModel(n, file)
	if err != nil {
		return err
	}
	n.live.Store(s.newLive(n, l, m))
	return nil
}

// reportLost says, once per change, that a namespace's published version
// vanished from Redis (an outage of that store: a log line, the
// precog_lookup_redis_version_lost gauge, and /readyz) or came back.
func (s *Server) reportLost(ns string) func(version string, lost bool) {
	g := s.metrics.versionLost.WithLabelValues(ns)
	return func(version string, lost bool) {
		if lost {
			g.Set(1)
			s.cfg.Logger.Error("the published version vanished from Redis: its reads are unavailable until the next publish (Redis restarted without its data, or flushed?)",
				"namespace", ns, "version", version)
			return
		}
		g.Set(0)
		s.cfg.Logger.Info("a version is published in Redis again", "namespace", ns)
	}
}

func (s *Server) startWatcher(ctx context.Context) {
	w := &versionWatcher{log: s.cfg.Logger, poll: s.cfg.VersionPoll, byConn: map[*redisConn][]*redisStore{}}
	for _, name := range s.names {
		n := s.ns[name]
		if n.redis == nil {
			continue
		}
		w.byConn[n.redis.conn] = append(w.byConn[n.redis.conn], n.redis)
		rctx, cancel := context.WithTimeout(ctx, 4*s.cfg.StoreTimeout)
		if err := n.redis.refresh(rctx); err != nil {
			s.cfg.Logger.Warn("cannot read the published version at start; will retry", "namespace", name, "err", err)
		}
		cancel()
	}
	s.watcher = w
	w.start(ctx, s.cfg.StoreTimeout)
	for _, name := range s.names {
		if n := s.ns[name]; n.reload != nil {
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				s.reloader(ctx, n)
			}()
		}
	}
}

// Namespaces lists the served namespaces, sorted.
func (s *Server) Namespaces() []string { return append([]string(nil), s.names...) }

// ListenAndServe serves on cfg.Addr until ctx ends, then stops accepting,
// drains in-flight requests (up to DrainTimeout) and closes the server.
func (s *Server) ListenAndServe(ctx context.Context) error {
	srv := &http.Server{
		Addr:              s.cfg.Addr,
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       s.cfg.RequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	s.cfg.Logger.Info("lookup API listening", "addr", s.cfg.Addr, "namespaces", strings.Join(s.names, ","))
	select {
	case err := <-errc:
		s.Close()
		return fmt.Errorf("lookup: listen %s: %w", s.cfg.Addr, err)
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("lookup API draining", "timeout", s.cfg.DrainTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	err := srv.Shutdown(dctx)
	s.Close()
	if err != nil {
		return fmt.Errorf("lookup: drain: %w", err)
	}
	return nil
}

// Close stops background work, the live batchers, the models and the store
// connections. Requests still running afterwards fail.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		if s.watcher != nil {
			s.watcher.wait()
		}
		s.bg.Wait()
		for _, n := range s.ns {
			if lv := n.live.Load(); lv != nil {
				_ = lv.release()
			}
		}
		for _, c := range s.redisConns {
			_ = c.close()
		}
		for _, p := range s.pgPools {
			p.Close()
		}
	})
	return nil
}
