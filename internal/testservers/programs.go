package testservers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartRedis starts a private redis-server for a program that is not a test
// (the benchmark harness), the same way NewRedis does for tests, and returns
// its address. StopAll stops it.
func StartRedis() (string, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "", fmt.Errorf("testservers: redis-server not installed: %w; run `make servers`", err)
	}
	dir, err := makeTempDir("redis")
	if err != nil {
		return "", err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		proc, err := startRedisProc(dir, port, nil)
		if err != nil {
			lastErr = err
			continue
		}
		proc.dir = dir
		proc.removeDir = true
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
	}
	_ = os.RemoveAll(dir)
	return "", fmt.Errorf("testservers: redis did not start: %w", lastErr)
}

// StartPostgres returns the DSN of a fresh, empty database named name on the
// shared Postgres server (started on first use), for programs that are not
// tests. The database lives until StopAll stops the server.
func StartPostgres(name string) (string, error) {
	pgOnce.Do(func() { pgShared, pgErr = startPostgres() })
	if pgErr != nil {
		return "", pgErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := pgx.Identifier{name}.Sanitize()
	if _, err := pgShared.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("testservers: drop database %s: %w", name, err)
	}
	if _, err := pgShared.admin.Exec(ctx, "CREATE DATABASE "+id+" TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		return "", fmt.Errorf("testservers: create database %s: %w", name, err)
	}
	return pgDSN(pgShared.user, pgShared.host, pgShared.port, name), nil
}
