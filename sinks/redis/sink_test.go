package redis

import (
	"context"
	"errors"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func TestWritePublishRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 7; sp.TTL = jobs.Duration{Duration: 90 * time.Minute} })
	ns := rs.Prefix
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	// Two shards, batches not aligned to the pipeline batch.
	if err := writeShard(ctx, s, run, 0, 0, 100, 13, 3); err != nil {
		t.Fatal(err)
	}
	if err := writeShard(ctx, s, run, 1, 100, 250, 64, 3); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.Current(ctx, run); cur != "" {
		t.Fatalf("current before publish = %q", cur)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	if cur, _ := c.Get(ctx, CurrentKey(ns)).Result(); cur != "v1" {
		t.Fatalf("current = %q, want v1", cur)
	}
	checkVersion(t, c, ns, run, 250, 3)
	// TTL on every record key, within the configured bound.
	for k := range readAll(t, c, ns+":v1:*") {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 89*time.Minute || ttl > 90*time.Minute {
			t.Fatalf("%s: TTL %s, want about 90m", k, ttl)
		}
	}
	// Publishing again is a no-op cutover; versions lists v1 once.
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	if vs, _ := s.Versions(ctx, run); !slices.Equal(vs, []string{"v1"}) {
		t.Fatalf("versions = %v", vs)
	}
}

func TestNoTTLWhenZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.TTL = jobs.Duration{} })
	run := testRun("v1")
	if err := writeShard(ctx, s, run, 0, 0, 10, 10, 1); err != nil {
		t.Fatal(err)
	}
	for k := range readAll(t, c, rs.Prefix+":v1:*") {
		if ttl := c.PTTL(ctx, k).Val(); ttl != -1 {
			t.Fatalf("%s: PTTL %s, want none (-1)", k, ttl)
		}
	}
}

// pipeHook records the pipelines the client really sends.
type pipeHook struct {
	delay    time.Duration
	inflight atomic.Int64
	maxIn    atomic.Int64
	mu       sync.Mutex
	sizes    []int
	before   func(n int) // called before each pipeline with its sequence number
	seq      atomic.Int64
}

func (h *pipeHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *pipeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}
func (h *pipeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		sets := 0 // data pipelines: the key record's APPEND, then SETs
		for _, c := range cmds {
			if c.Name() == "set" {
				sets++
			}
		}
		if sets == 0 {
			return next(ctx, cmds)
		}
		n := h.seq.Add(1)
		if h.before != nil {
			h.before(int(n))
		}
		in := h.inflight.Add(1)
		for {
			m := h.maxIn.Load()
			if in <= m || h.maxIn.CompareAndSwap(m, in) {
				break
			}
		}
		h.mu.Lock()
		h.sizes = append(h.sizes, sets)
		h.mu.Unlock()
		time.Sleep(h.delay)
		err := next(ctx, cmds)
		h.inflight.Add(-1)
		return err
	}
}

func TestPipelineBatchAndDepth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 50; sp.PipelineDepth = 3 })
	h := &pipeHook{delay: 20 * time.Millisecond}
	s.client.AddHook(h)
	run := testRun("v1")
	if err := writeShard(ctx, s, run, 0, 0, 1020, 100, 2); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	sizes := slices.Clone(h.sizes)
	h.mu.Unlock()
	if len(sizes) != 21 {
		t.Fatalf("%d pipelines, want 21 (1020 rows / 50)", len(sizes))
	}
	full := 0
	for _, n := range sizes {
		if n == 50 {
			full++
		} else if n != 20 {
			t.Fatalf("pipeline of %d SETs; want 50 or the final 20", n)
		}
	}
	if full != 20 {
		t.Fatalf("%d full pipelines, want 20", full)
	}
	if m := h.maxIn.Load(); m != 3 {
		t.Fatalf("max pipelines in flight = %d, want depth 3", m)
	}
	checkVersion(t, c, rs.Prefix, run, 1020, 2)
}

// TestRetryAfterConnectionKill kills every client connection while a
// shard is being written: the failed pipelines are re-sent, and the
// result is exactly the shard's rows.
func TestRetryAfterConnectionKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.NewRedis(t)
	admin := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 500; sp.PipelineDepth = 4 })
	run := testRun("v1")
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	sw := w.(*shardWriter)
	// Kill the sink's connections (not ours: SKIPME yes) every few ms
	// until a pipeline has failed and been re-sent.
	stop := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for sw.retries.Load() < 2 {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
				t.Errorf("client kill: %v", err)
				return
			}
		}
	}()
	for lo := 0; lo < 10000; lo += 250 {
		rec := testBatch(run, lo, lo+250, 50)
		if err := w.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-killed
	if sw.retries.Load() == 0 {
		t.Fatalf("no pipeline was retried: the kill did not hit")
	}
	if sw.rows.Load() != 10000 {
		t.Fatalf("acknowledged %d rows, want 10000", sw.rows.Load())
	}
	if n := admin.DBSize(ctx).Val(); n != 10000+2 { // + key record and markers
		t.Fatalf("DBSIZE %d, want 10000 records, a key record and the shard markers", n)
	}
	checkVersion(t, admin, rs.Prefix, run, 10000, 50)
}

// TestRedisRestartMidShard stops the server (as a crash) while a shard is
// written and starts it again: with an fsync-always AOF nothing that was
// acknowledged is lost, and the writer's retries fill in the rest.
func TestRedisRestartMidShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.NewRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) {
		sp.PipelineBatch = 50
		sp.Timeout = jobs.Duration{Duration: time.Second}
	})
	var once sync.Once
	restarted := make(chan struct{})
	h := &pipeHook{}
	h.before = func(n int) {
		if n == 10 {
			once.Do(func() {
				stopped := make(chan struct{})
				go func() {
					defer close(restarted)
					rs.Stop()
					close(stopped)
					// Down longer than go-redis's own dial retries, so the
					// sink's pipeline retry is what recovers.
					time.Sleep(1500 * time.Millisecond)
					rs.Start()
				}()
				<-stopped // this pipeline is sent to a stopped server, whatever the timing
			})
		}
	}
	s.client.AddHook(h)
	run := testRun("v1")
	if err := writeShard(ctx, s, run, 0, 0, 3000, 100, 2); err != nil {
		t.Fatal(err)
	}
	<-restarted
	if n := h.seq.Load(); n <= 60 {
		t.Fatalf("%d pipeline sends for 60 pipelines: the restart did not interrupt any", n)
	}
	c := rs.Client(t)
	checkVersion(t, c, rs.Prefix, run, 3000, 2)
}

func TestRetentionAndRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.NewRedis(t) // private: pub/sub is per server
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Retain = 2 })
	ns := rs.Prefix
	sub := c.Subscribe(ctx, Channel(ns))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmation
		t.Fatal(err)
	}
	msgs := sub.Channel()
	versions := []string{"v1", "v2", "v3", "v4"}
	for _, v := range versions {
		run := testRun(v)
		if err := writeShard(ctx, s, run, 0, 0, 2500, 500, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			if m.Payload != v {
				t.Fatalf("notice %q, want %q", m.Payload, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no publish notice for %s", v)
		}
		time.Sleep(2 * time.Millisecond) // distinct publish times
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitCleanup(wctx); err != nil {
		t.Fatal(err)
	}
	run := testRun("v4")
	vs, err := s.Versions(ctx, run)
	if err != nil || !slices.Equal(vs, []string{"v4", "v3"}) {
		t.Fatalf("versions = %v, %v; want [v4 v3]", vs, err)
	}
	for _, v := range []string{"v1", "v2"} {
		if n := len(readAll(t, c, ns+":"+v+":*")); n != 0 {
			t.Fatalf("expired version %s still has %d keys", v, n)
		}
	}
	checkVersion(t, c, ns, testRun("v3"), 2500, 1)
	checkVersion(t, c, ns, testRun("v4"), 2500, 1)
	if n := c.SCard(ctx, gcKey(ns)).Val(); n != 0 {
		t.Fatalf("gc set has %d entries after cleanup", n)
	}

	// Rollback to a retained version: one SET, announced.
	if err := s.Rollback(ctx, run, "v3"); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.Current(ctx, run); cur != "v3" {
		t.Fatalf("current after rollback = %q", cur)
	}
	select {
	case m := <-msgs:
		if m.Payload != "v3" {
			t.Fatalf("rollback notice %q", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no rollback notice")
	}
	err = s.Rollback(ctx, run, "v1")
	if err == nil || !strings.Contains(err.Error(), `"v1" is not retained`) || !strings.Contains(err.Error(), "v4, v3") {
		t.Fatalf("rollback to expired version: %v", err)
	}
	// A published (retained) version cannot be aborted.
	if err := s.Abort(ctx, testRun("v4")); err == nil || !strings.Contains(err.Error(), "is published") {
		t.Fatalf("abort of a published version: %v", err)
	}
	// A new publish after the rollback keeps current and the newest other.
	run5 := testRun("v5")
	if err := writeShard(ctx, s, run5, 0, 0, 10, 10, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run5); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitCleanup(wctx); err != nil {
		t.Fatal(err)
	}
	if vs, _ := s.Versions(ctx, run5); !slices.Equal(vs, []string{"v5", "v4"}) {
		t.Fatalf("versions after v5 = %v", vs)
	}
	if n := len(readAll(t, c, ns+":v3:*")); n != 0 {
		t.Fatalf("v3 still has %d keys", n)
	}
}

// TestGCResumesAfterCrash: versions left in the gc set (a collector
// interrupted by a crash) are deleted at the next publish.
func TestGCResumesAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, nil)
	old := testRun("old")
	if err := writeShard(ctx, s, old, 0, 0, 3000, 1000, 0); err != nil {
		t.Fatal(err)
	}
	c.SAdd(ctx, gcKey(rs.Prefix), "old")
	run := testRun("v1")
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, c, rs.Prefix+":old:*")); n != 0 {
		t.Fatalf("%d keys of the collected version remain", n)
	}
}

func TestAbortUnpublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, nil)
	pub, run := testRun("v1"), testRun("v2")
	if err := writeShard(ctx, s, pub, 0, 0, 50, 50, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, pub); err != nil {
		t.Fatal(err)
	}
	if err := writeShard(ctx, s, run, 0, 0, 2500, 500, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, run); err != nil { // idempotent
		t.Fatal(err)
	}
	if n := len(readAll(t, c, rs.Prefix+":v2:*")); n != 0 {
		t.Fatalf("%d keys of the aborted run remain", n)
	}
	checkVersion(t, c, rs.Prefix, pub, 50, 1)
}

func TestInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Publish = jobs.RedisPublishInPlace })
	run := testRun("v1")
	if err := writeShard(ctx, s, run, 0, 0, 30, 30, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	raw, err := c.Get(ctx, RecordKey(rs.Prefix, "", "7")).Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRecord(t, run, 7, 2, raw)
	if v := c.HGet(ctx, metaKey(rs.Prefix), "version").Val(); v != "v1" {
		t.Fatalf("meta version %q", v)
	}
	if cur, err := s.Current(ctx, run); cur != "v1" || err != nil {
		t.Fatalf("in_place Current = %q, %v", cur, err)
	}
	if c.Exists(ctx, CurrentKey(rs.Prefix)).Val() != 0 {
		t.Fatal("in_place publish set current")
	}
	if err := s.Rollback(ctx, run, "v0"); err == nil || !strings.Contains(err.Error(), "in_place") {
		t.Fatalf("rollback in place: %v", err)
	}
}

func TestNonFiniteFloatNamesKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	s := newTestSink(t, rs, nil)
	run := testRun("v1")
	w, err := s.Shard(ctx, run, 3)
	if err != nil {
		t.Fatal(err)
	}
	rec := nanBatch(run)
	defer rec.Release()
	err = w.Write(ctx, rec)
	if err == nil || !strings.Contains(err.Error(), `key "41"`) || !strings.Contains(err.Error(), `field "score"`) || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("NaN: %v", err)
	}
	if err := w.Commit(ctx); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("commit after a failed write: %v", err)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "s3cr3t-Pa55word"
	rs := testservers.NewRedis(t, "--requirepass", secret)
	s := newTestSink(t, rs, nil)
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := writeShard(ctx, s, run, 0, 0, 10, 10, 1); err != nil {
		t.Fatal(err)
	}
	bad := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Password = "wrong-" + secret })
	err := bad.Prepare(ctx, run)
	if err == nil {
		t.Fatal("wrong password accepted")
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the password: %v", err)
	}
	if !strings.Contains(err.Error(), "WRONGPASS") || !strings.Contains(err.Error(), rs.Addr) {
		t.Fatalf("wrong password error should say WRONGPASS and name %s: %v", rs.Addr, err)
	}
	none := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.Password = "" })
	if err := none.Prepare(ctx, run); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("no password: %v", err)
	}
	// A URL with credentials: the password never shows in errors either.
	_, err = New(jobs.RedisSinkSpec{Addr: "redis://u:" + secret + "@127.0.0.1:notaport/0", Namespace: "x"})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("bad URL: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	s, err := New(jobs.RedisSinkSpec{Addr: addr, Namespace: "x", Password: "hunter2-secret", Timeout: jobs.Duration{Duration: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.retry = retryPolicy{attempts: 4, base: 10 * time.Millisecond, max: 50 * time.Millisecond}
	err = s.Prepare(ctx, testRun("v1"))
	if !errors.Is(err, sinks.ErrUnreachable) || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("unreachable: %v", err)
	}
	// A shard start (which reads the server's state for its commit marker)
	// gives up after bounded retries with the same error kind.
	start := time.Now()
	_, err = s.Shard(ctx, testRun("v1"), 0)
	if !errors.Is(err, sinks.ErrUnreachable) || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("shard on unreachable: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %s", d)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec jobs.RedisSinkSpec
		want string
	}{
		{jobs.RedisSinkSpec{Namespace: "x"}, "sinks.redis.addr: required"},
		{jobs.RedisSinkSpec{Addr: "a:1", Addrs: []string{"b:1"}, Namespace: "x"}, "addr or addrs, not both"},
		{jobs.RedisSinkSpec{Addr: "nohostport", Namespace: "x"}, "sinks.redis.addrs[0]"},
		{jobs.RedisSinkSpec{Addr: "a:1"}, "sinks.redis.namespace: required"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "a:b"}, "sinks.redis.namespace"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "a*"}, "sinks.redis.namespace"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "x", Publish: "eventually"}, "sinks.redis.publish"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "x", Retain: -1}, "sinks.redis.retain"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "x", PipelineBatch: -5}, "sinks.redis.pipeline_batch"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "x", PipelineDepth: 5000}, "sinks.redis.pipeline_depth"},
		{jobs.RedisSinkSpec{Addr: "a:1", Namespace: "x", TTL: jobs.Duration{Duration: -time.Second}}, "sinks.redis.ttl"},
		{jobs.RedisSinkSpec{Addrs: []string{"a:1", "b:1"}, Namespace: "x", DB: 3}, "sinks.redis.db"},
	}
	for _, tc := range cases {
		_, err := New(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
	// A run version that would corrupt keys or SCAN patterns.
	s, err := New(jobs.RedisSinkSpec{Addr: "127.0.0.1:1", Namespace: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, v := range []string{"", "a*b", "a:b", "current"} {
		if _, err := s.Shard(context.Background(), testRun(v), 0); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
}

// TestBatchesRecycledAcrossShards checks that a shard attempt's pipeline
// batches, grown to a pipeline of records, go to the sink's pool when it
// commits and that the next attempt starts from one of them rather than
// from an empty arena. (GC is off so that the pool keeps what it holds.)
func TestBatchesRecycledAcrossShards(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ctx := context.Background()
	rs := testservers.Redis(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 50; sp.PipelineDepth = 2 })
	run := testRun("v1")
	if err := writeShard(ctx, s, run, 0, 0, 500, 20, 1); err != nil {
		t.Fatal(err)
	}
	sw, err := s.Shard(ctx, run, 1)
	if err != nil {
		t.Fatal(err)
	}
	w := sw.(*shardWriter)
	defer w.Abort(ctx)
	b := w.getBatch()
	if cap(b.arena) == 0 || len(b.arena) != 0 || len(b.spans) != 0 {
		t.Fatalf("second shard's first batch: arena cap %d, len %d, %d spans; want a reset batch with the first shard's capacity",
			cap(b.arena), len(b.arena), len(b.spans))
	}
}

// TestWriteHoldsBatchWhileEncoding: Write returns while its full pipelines
// are still being encoded on other goroutines, which hold a reference to
// the batch. The caller releases its own at once; every record still
// arrives intact, and once Commit returns the writer has released the
// batches too (a checked allocator finds no buffer left).
func TestWriteHoldsBatchWhileEncoding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 50; sp.PipelineDepth = 4 })
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(sinktest.PoisonAllocator{})
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < 1000; lo += 230 { // 4 full pipelines and a partial one per batch
		rec := testBatchWith(mem, run, lo, min(lo+230, 1000), 3)
		err := w.Write(ctx, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, c, rs.Prefix, run, 1000, 3)
}

// TestRejectInConcurrentPipeline: a row that cannot be encoded in a
// pipeline encoded after Write returned fails the attempt all the same:
// Commit (if not an earlier Write) returns the error naming its key.
func TestRejectInConcurrentPipeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	s := newTestSink(t, rs, func(sp *jobs.RedisSinkSpec) { sp.PipelineBatch = 2; sp.PipelineDepth = 4 })
	run := testRun("v1")
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := nanBatch(run) // rows 40..42, row 41 NaN: in the first full pipeline
	defer rec.Release()
	werr := w.Write(ctx, rec)
	cerr := w.Commit(ctx)
	err = cerr
	if werr != nil {
		err = werr
		if cerr == nil {
			t.Fatal("Commit succeeded after a failed Write")
		}
	}
	if err == nil || !strings.Contains(err.Error(), `key "41"`) || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("NaN in a concurrent pipeline: Write %v, Commit %v", werr, cerr)
	}
}
