package testservers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedRedisDBs is the number of DB indexes of the shared server; tests get
// indexes 1..sharedRedisDBs-1 (0 stays unused so a test that forgets its DB
// writes nowhere another test reads).
const sharedRedisDBs = 512

// RedisServer is a test's view of a Redis server: the shared one (from Redis,
// with a DB index of its own) or a private one (from NewRedis, DB 0).
type RedisServer struct {
	// Addr is host:port of the server.
	Addr string
	// DB is the test's DB index: flushed before the test gets it and after.
	DB int
	// Prefix is unique to the test (e.g. "t7"); put it into pub/sub channel
	// names, which Redis shares across DB indexes.
	Prefix string
	// Password is the server's requirepass ("" when none).
	Password string

	t       testing.TB
	private bool
	mu      sync.Mutex
	proc    *serverProc
	args    []string
	dir     string
}

// Client returns a go-redis client on the test's server and DB, closed at
// cleanup.
func (r *RedisServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, DB: r.DB, Password: r.Password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop stops a private server (from NewRedis) as a crash would look to
// clients: connections drop, nothing is saved. It fails the test on the
// shared server, which other tests use.
func (r *RedisServer) Stop() {
	r.t.Helper()
	if !r.private {
		r.t.Fatalf("testservers: Stop on the shared Redis; use NewRedis for a server a test may stop")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.stopSig = syscall.SIGKILL
		r.proc.stop()
		r.proc = nil
	}
}

// Start restarts a stopped private server on the same address (empty, since
// nothing is persisted). It fails the test on the shared server.
func (r *RedisServer) Start() {
	r.t.Helper()
	if !r.private {
		r.t.Fatalf("testservers: Start on the shared Redis; use NewRedis for a server a test may restart")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		return
	}
	port, _ := strconv.Atoi(r.Addr[strings.LastIndexByte(r.Addr, ':')+1:])
	var err error
	// The port was ours a moment ago; retry briefly if the kernel holds it.
	for i := 0; i < 50; i++ {
		var proc *serverProc
		proc, err = startRedisProc(r.dir, port, r.args)
		if err == nil {
			r.proc = proc
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("testservers: restart redis on %s: %v", r.Addr, err)
}

// redisShared is the shared server of this test binary and its DB indexes.
type redisShared struct {
	addr string
	free chan int
}

var (
	redisOnce    sync.Once
	redisSrv     *redisShared
	redisErr     error
	redisMissing bool
)

// Redis returns a handle on the shared redis-server (started on first use)
// with a DB index no other running test uses, empty at the start and flushed
// at cleanup. Safe for parallel tests; with more than 511 tests at once, the
// extra ones wait for a DB index.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	redisOnce.Do(func() { redisSrv, redisErr = startSharedRedis() })
	if redisErr != nil {
		if redisMissing {
			missingBinary(t, "redis-server", redisErr)
		}
		t.Fatalf("%v", redisErr)
	}
	var db int
	select {
	case db = <-redisSrv.free:
	case <-time.After(5 * time.Minute):
		t.Fatalf("testservers: no free Redis DB index after 5m (%d in use)", sharedRedisDBs-1)
	}
	c := redis.NewClient(&redis.Options{Addr: redisSrv.addr, DB: db})
	ctx := context.Background()
	if err := c.FlushDB(ctx).Err(); err != nil {
		c.Close()
		redisSrv.free <- db
		t.Fatalf("testservers: flush redis db %d: %v", db, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		if err := c.FlushDB(context.Background()).Err(); err != nil {
			t.Errorf("testservers: flush redis db %d: %v", db, err)
			return // not returned to the pool: it may hold data
		}
		redisSrv.free <- db
	})
	return &RedisServer{Addr: redisSrv.addr, DB: db, Prefix: uniqueName("t"), t: t}
}

// NewRedis starts a private redis-server for this test, stopped at cleanup.
// Tests may Stop and Start it. extraArgs go to redis-server, e.g.
// "--requirepass", "secret" (then Password is set for Client).
func NewRedis(t testing.TB, extraArgs ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		missingBinary(t, "redis-server", err)
	}
	dir, err := makeTempDir("redis")
	if err != nil {
		t.Fatalf("%v", err)
	}
	r := &RedisServer{DB: 0, Prefix: uniqueName("t"), t: t, private: true, args: extraArgs, dir: dir}
	for i := 0; i+1 < len(extraArgs); i++ {
		if extraArgs[i] == "--requirepass" {
			r.Password = extraArgs[i+1]
		}
	}
	t.Cleanup(func() {
		r.mu.Lock()
		if r.proc != nil {
			r.proc.stop()
			r.proc = nil
		}
		r.mu.Unlock()
		_ = os.RemoveAll(dir)
	})
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("%v", err)
		}
		proc, err := startRedisProc(dir, port, extraArgs)
		if err != nil {
			lastErr = err
			continue
		}
		r.proc = proc
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return r
	}
	t.Fatalf("testservers: private redis did not start: %v", lastErr)
	return nil
}

// startSharedRedis starts the shared server with many DB indexes.
func startSharedRedis() (*redisShared, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		redisMissing = true
		return nil, err
	}
	dir, err := makeTempDir("redis")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		proc, err := startRedisProc(dir, port, []string{"--databases", strconv.Itoa(sharedRedisDBs)})
		if err != nil {
			lastErr = err
			continue
		}
		proc.dir = dir
		proc.removeDir = true
		s := &redisShared{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), free: make(chan int, sharedRedisDBs)}
		for db := 1; db < sharedRedisDBs; db++ {
			s.free <- db
		}
		return s, nil
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("testservers: redis did not start: %w", lastErr)
}

// startRedisProc starts redis-server on port with no persistence and no
// unix socket, and waits until it answers.
func startRedisProc(dir string, port int, extra []string) (*serverProc, error) {
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--unixsocket", "", "--dir", dir, "--daemonize", "no", "--protected-mode", "no",
		"--loglevel", "warning",
	}
	args = append(args, extra...)
	cmd := exec.Command("redis-server", args...)
	proc, err := startProc("redis-server", cmd, filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)), syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitRedis(proc, addr, 10*time.Second); err != nil {
		proc.stopSig = syscall.SIGKILL
		proc.stop()
		return nil, err
	}
	return proc, nil
}

// waitRedis waits until the server answers PING with anything but LOADING
// (NOAUTH counts as up: the server is serving).
func waitRedis(p *serverProc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := waitTCP(p, addr, time.Until(deadline)); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			var line string
			if err == nil {
				line, err = bufio.NewReader(c).ReadString('\n')
			}
			c.Close()
			if err == nil && !strings.HasPrefix(line, "-LOADING") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testservers: redis on %s not ready: %v\n%s", addr, err, p.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
