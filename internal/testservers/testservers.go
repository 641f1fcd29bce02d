// Package testservers starts the real Postgres and Redis servers that
// integration tests run against. There are no mocks: every test talks to a
// real postgres and a real redis-server, started once per test binary and
// shared, with each test isolated in its own database (Postgres) or its own
// DB index and key prefix (Redis).
//
// Use it from a test package like this:
//
//	func TestMain(m *testing.M) { testservers.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pg := testservers.Postgres(t)  // pg.DSN: a fresh database, dropped at cleanup
//		rd := testservers.Redis(t)     // rd.Addr, rd.DB: a fresh DB index, flushed at cleanup
//		c := rd.Client(t)              // a go-redis client on that DB, closed at cleanup
//		priv := testservers.NewRedis(t) // a private redis-server the test may Stop() and Start()
//		s3 := testservers.S3(t)        // s3.URL("data/x.parquet"): a fresh bucket on a real S3 server (versitygw)
//		...
//	}
//
// Data lives under $PRECOG_TESTSERVERS_DIR, else /dev/shm when writable, else
// the temp dir; an initdb template is kept there and copied per test binary.
//
// Servers are started lazily, on the first call that needs them, and stopped
// by Main when the tests finish. A test binary that crashes does not leave
// servers behind: each server is started with a parent-death signal, and
// temp directories of dead test binaries are removed by the next start.
//
// Binaries come from PATH, or for Postgres also from /usr/lib/postgresql/*/bin,
// and for the S3 server (versitygw) from S3ServerCacheDir, where
// scripts/install-servers.sh builds the pinned version.
// When one is missing the test fails (it is never skipped) with a message
// saying to run `make servers`. When running as root, Postgres runs as the
// `postgres` user, since it refuses to run as root.
//
// Redis pub/sub channels are shared by all DB indexes of a server: tests that
// publish should put Redis.Prefix into their channel (or namespace) names, or
// use NewRedis.
package testservers

import (
	"errors"
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
)

// Main runs the tests and then stops every server this package started.
// Call it from TestMain: func TestMain(m *testing.M) { testservers.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}

// registry of started processes, stopped by StopAll.
var (
	procMu sync.Mutex
	procs  = map[*serverProc]struct{}{}
)

// StopAll stops every server started by this package and removes their
// directories. Main calls it; tests need not.
func StopAll() {
	procMu.Lock()
	list := make([]*serverProc, 0, len(procs))
	for p := range procs {
		list = append(list, p)
	}
	procMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
}

// serverProc is one running server process and the directory it owns.
type serverProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit error, valid after done
	dir  string        // removed at stop when removeDir
	// removeDir is false for processes that are restarted in the same dir.
	removeDir bool
	stopSig   syscall.Signal
	logPath   string
}

// startProc starts cmd with a parent-death signal so that a crashed test
// binary takes its servers with it.
func startProc(name string, cmd *exec.Cmd, logPath string, stopSig syscall.Signal) (*serverProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testservers: %s log %s: %w", name, logPath, err)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("testservers: start %s (%s): %w", name, cmd.Path, err)
	}
	p := &serverProc{name: name, cmd: cmd, done: make(chan struct{}), stopSig: stopSig, logPath: logPath}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	procMu.Lock()
	procs[p] = struct{}{}
	procMu.Unlock()
	return p, nil
}

// exited reports whether the process has exited.
func (p *serverProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop signals the process, waits up to 5 s, then kills it, and removes its
// directory when it owns one.
func (p *serverProc) stop() {
	procMu.Lock()
	delete(procs, p)
	procMu.Unlock()
	if !p.exited() {
		_ = p.cmd.Process.Signal(p.stopSig)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	if p.removeDir && p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// logTail returns the last few lines of the server's log, for errors.
func (p *serverProc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process
// may take it before the server binds it; callers retry on bind failure.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testservers: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitTCP waits until addr accepts connections, the process exits, or the
// deadline passes.
func waitTCP(p *serverProc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return fmt.Errorf("testservers: %s exited during start: %v\n%s", p.name, p.err, p.logTail())
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testservers: %s not accepting on %s after %s\n%s", p.name, addr, timeout, p.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// baseDir is where servers keep their data: $PRECOG_TESTSERVERS_DIR, else
// /dev/shm where it is a writable tmpfs (copying a Postgres data directory
// there takes 0.1 s against over 1 s on a busy disk), else the temp dir.
func baseDir() string {
	if d := os.Getenv("PRECOG_TESTSERVERS_DIR"); d != "" {
		return d
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && syscall.Access("/dev/shm", 2) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// tempPrefix names this package's temp directories; the owner pid file in
// each lets a later start remove the directories of dead test binaries.
const tempPrefix = "precog-testservers-"

var cleanStaleOnce sync.Once

// makeTempDir creates a directory under /tmp owned by this process, after
// removing directories left by test binaries that died.
func makeTempDir(kind string) (string, error) {
	cleanStaleOnce.Do(cleanStale)
	dir, err := os.MkdirTemp(baseDir(), tempPrefix+kind+"-")
	if err != nil {
		return "", fmt.Errorf("testservers: temp dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", fmt.Errorf("testservers: temp dir %s: %w", dir, err)
	}
	return dir, nil
}

// cleanStale removes temp directories whose owning process is gone.
func cleanStale() {
	matches, _ := filepath.Glob(filepath.Join(baseDir(), tempPrefix+"*"))
	for _, dir := range matches {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// missingBinary fails the test for a server binary that is not installed.
func missingBinary(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("testservers: %s not installed (required in CI): %v; run `make servers`", what, err)
	}
	t.Fatalf("testservers: %s not installed: %v; run `make servers` to install redis-server and postgresql", what, err)
}

// uniqueName returns a short identifier-safe name unique within the process.
func uniqueName(prefix string) string {
	n := nameSeq.Add(1)
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), n)
}
