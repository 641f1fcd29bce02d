package testservers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var nameSeq atomic.Int64

// PG is one test's Postgres database on the shared server. The database is
// created empty from template0 and dropped (with its connections) at cleanup.
type PG struct {
	// DSN connects to the test's database as a superuser, e.g.
	// postgres://postgres@127.0.0.1:40123/t_1234_7?sslmode=disable.
	DSN string
	// Database is the test's database name.
	Database string
	// Host and Port are the server's TCP address; User is the superuser.
	Host string
	Port int
	User string
}

// Pool returns a pgx pool on the test's database, closed at cleanup.
func (pg *PG) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pg.DSN)
	if err != nil {
		t.Fatalf("testservers: pool on %s: %v", pg.Database, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Exec runs sql on the test's database and fails the test on error.
func (pg *PG) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatalf("testservers: connect %s: %v", pg.Database, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("testservers: exec on %s: %q: %v", pg.Database, sql, err)
	}
}

// pgServer is the shared Postgres server of this test binary, or a
// private one (NewPostgres).
type pgServer struct {
	proc    *serverProc
	host    string
	port    int
	user    string
	admin   *pgxpool.Pool // on database "postgres", for CREATE/DROP DATABASE
	dataDir string
	// command makes the server's command line again, for Restart.
	command func() *exec.Cmd
	logPath string
}

var (
	pgOnce   sync.Once
	pgShared *pgServer
	pgErr    error
	// pgMissing is set when the binaries are not installed.
	pgMissing bool
)

// Postgres returns a fresh, empty database on the shared server (started on
// first use), dropped at the end of the test. Safe for parallel tests.
func Postgres(t testing.TB) *PG {
	t.Helper()
	pgOnce.Do(func() { pgShared, pgErr = startPostgres() })
	if pgErr != nil {
		if pgMissing {
			missingBinary(t, "postgres", pgErr)
		}
		t.Fatalf("%v", pgErr)
	}
	srv := pgShared
	name := uniqueName("t")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// template0 accepts no connections, so parallel creates never collide on it.
	if _, err := srv.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		t.Fatalf("testservers: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := srv.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testservers: drop database %s: %v", name, err)
		}
	})
	return &PG{
		DSN:      pgDSN(srv.user, srv.host, srv.port, name),
		Database: name,
		Host:     srv.host,
		Port:     srv.port,
		User:     srv.user,
	}
}

func pgDSN(usr, host string, port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(usr),
		Host:     fmt.Sprintf("%s:%d", host, port),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// pgBinDir finds the directory holding initdb and postgres: PATH first, then
// the newest /usr/lib/postgresql/*/bin.
func pgBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		if e1 == nil && e2 == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb/postgres not found in PATH or /usr/lib/postgresql/*/bin")
}

// pgMajor extracts N from /usr/lib/postgresql/N/bin.
func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// runAs returns the credentials to run Postgres with: the postgres user when
// we are root (Postgres refuses root), nil otherwise.
func runAs() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("testservers: running as root and no `postgres` user to run postgres as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, uid, gid, nil
}

// startPostgres initialises a cluster in a temp dir and starts it on a free
// port, retrying with another port if one was taken meanwhile.
// PGServer is a private Postgres server for one test (NewPostgres), which
// the test may restart to check that clients ride it out.
type PGServer struct {
	PG
	srv *pgServer
	mu  sync.Mutex
}

// NewPostgres starts a private Postgres server with one empty database
// (PG.Database), stopped and removed at cleanup.
func NewPostgres(t testing.TB) *PGServer {
	t.Helper()
	srv, err := startPostgres()
	if err != nil {
		if pgMissing {
			missingBinary(t, "postgres", err)
		}
		t.Fatalf("%v", err)
	}
	p := &PGServer{srv: srv}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.srv.admin != nil {
			p.srv.admin.Close()
		}
		p.srv.proc.removeDir = true
		p.srv.proc.stop()
	})
	const name = "private"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := srv.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		t.Fatalf("testservers: create database %s: %v", name, err)
	}
	p.PG = PG{DSN: pgDSN(srv.user, srv.host, srv.port, name), Database: name, Host: srv.host, Port: srv.port, User: srv.user}
	return p
}

// Restart stops the server (Stop), keeps it down for down, and starts it
// again (Start).
func (p *PGServer) Restart(t testing.TB, down time.Duration) {
	t.Helper()
	p.Stop(t)
	time.Sleep(down)
	p.Start(t)
}

// Stop stops the server as an operator's restart does (a fast shutdown:
// every connection is cut, committed data kept); it is down on return.
func (p *PGServer) Stop(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.srv
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	s.proc.removeDir = false
	s.proc.stopSig = syscall.SIGINT
	s.proc.stop()
}

// Start starts the server Stop stopped, on the same port and data, and
// waits until it accepts connections.
func (p *PGServer) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.srv
	dir := s.proc.dir
	proc, err := startProc("postgres", s.command(), s.logPath, syscall.SIGQUIT)
	if err != nil {
		t.Fatalf("testservers: restart postgres: %v", err)
	}
	proc.dir = dir
	s.proc = proc
	if err := s.waitReady(30 * time.Second); err != nil {
		t.Fatalf("testservers: restart postgres: %v", err)
	}
}

func startPostgres() (*pgServer, error) {
	bin, err := pgBinDir()
	if err != nil {
		pgMissing = true
		return nil, err
	}
	cred, uid, gid, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := makeTempDir("pg")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pgServer, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	sock := filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o755); err != nil {
		return fail(fmt.Errorf("testservers: %w", err))
	}
	if cred != nil {
		for _, p := range []string{dir, sock} {
			if err := os.Chown(p, uid, gid); err != nil {
				return fail(fmt.Errorf("testservers: chown %s to postgres: %w", p, err))
			}
		}
	}
	const superuser = "postgres"
	tmpl, err := pgTemplate(bin, superuser, cred, uid, gid)
	if err != nil {
		return fail(err)
	}
	if err := copyTree(tmpl, data, uid, gid); err != nil {
		return fail(fmt.Errorf("testservers: copy initdb template %s to %s: %w", tmpl, data, err))
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		command := func() *exec.Cmd {
			cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", sock, "-p", strconv.Itoa(port),
				"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
				"-c", "full_page_writes=off", "-c", "shared_buffers=64MB", "-c", "max_connections=400",
				"-c", "log_min_messages=warning",
				// mmap segments live in the data dir, so a killed server leaks none.
				"-c", "dynamic_shared_memory_type=mmap")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			cmd.Env = append(os.Environ(), "LC_ALL=C")
			return cmd
		}
		cmd := command()
		logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", attempt))
		if cred != nil {
			f, err := os.Create(logPath)
			if err == nil {
				f.Close()
				_ = os.Chown(logPath, uid, gid)
			}
		}
		// SIGQUIT: immediate shutdown; the data is thrown away anyway.
		proc, err := startProc("postgres", cmd, logPath, syscall.SIGQUIT)
		if err != nil {
			return fail(err)
		}
		proc.dir = dir
		proc.removeDir = true
		srv := &pgServer{proc: proc, host: "127.0.0.1", port: port, user: superuser, dataDir: data, command: command, logPath: logPath}
		if err := srv.waitReady(20 * time.Second); err != nil {
			lastErr = err
			tail := proc.logTail()
			proc.removeDir = false
			proc.stop()
			if strings.Contains(tail, "could not bind") || strings.Contains(tail, "already in use") || strings.Contains(err.Error(), "another postgres") {
				continue
			}
			return fail(err)
		}
		return srv, nil
	}
	return fail(fmt.Errorf("testservers: postgres did not start after 5 ports: %w", lastErr))
}

// waitReady waits until the server accepts queries and opens the admin pool.
func (s *pgServer) waitReady(timeout time.Duration) error {
	addr := fmt.Sprintf("%s:%d", s.host, s.port)
	if err := waitTCP(s.proc, addr, timeout); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	dsn := pgDSN(s.user, s.host, s.port, "postgres")
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			// The data directory proves it is our server, not another
			// process that took the port first.
			var dataDir string
			err = conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir)
			conn.Close(ctx)
			if err == nil && dataDir != s.dataDir {
				cancel()
				return fmt.Errorf("testservers: port %d answered by another postgres (data %s)", s.port, dataDir)
			}
		}
		cancel()
		if err == nil {
			break
		}
		if s.proc.exited() || time.Now().After(deadline) {
			return fmt.Errorf("testservers: postgres on %s not ready: %w\n%s", addr, err, s.proc.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("testservers: admin pool: %w", err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("testservers: admin pool: %w", err)
	}
	s.admin = pool
	return nil
}

// pgTemplate returns a data directory initialised by initdb, made once per
// machine and Postgres version and copied for each test binary: copying
// takes a tenth of what initdb takes.
func pgTemplate(bin, superuser string, cred *syscall.Credential, uid, gid int) (string, error) {
	out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("testservers: %s --version: %w", filepath.Join(bin, "postgres"), err)
	}
	ver := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r == '.' {
			return r
		}
		return -1
	}, string(out))
	final := filepath.Join(baseDir(), fmt.Sprintf("%spgtemplate-%s-%d", tempPrefix, ver, os.Geteuid()))
	if _, err := os.Stat(filepath.Join(final, "data", "PG_VERSION")); err == nil {
		return filepath.Join(final, "data"), nil
	}
	work, err := os.MkdirTemp(baseDir(), tempPrefix+"pginit-")
	if err != nil {
		return "", fmt.Errorf("testservers: temp dir: %w", err)
	}
	defer os.RemoveAll(work)
	if cred != nil {
		if err := os.Chown(work, uid, gid); err != nil {
			return "", fmt.Errorf("testservers: chown %s to postgres: %w", work, err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(work, "data"), "-A", "trust", "-U", superuser,
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testservers: initdb %s: %w\n%s", work, err, out)
	}
	// Another test binary may have won the race: then use its template.
	if err := os.Rename(work, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "data", "PG_VERSION")); serr == nil {
			return filepath.Join(final, "data"), nil
		}
		return "", fmt.Errorf("testservers: install initdb template %s: %w", final, err)
	}
	return filepath.Join(final, "data"), nil
}

// copyTree copies the directory src to dst (regular files, directories and
// symlinks), owned by uid:gid when uid >= 0.
func copyTree(src, dst string, uid, gid int) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		if uid >= 0 {
			return os.Lchown(target, uid, gid)
		}
		return nil
	})
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
