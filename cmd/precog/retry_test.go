package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testservers"
)

// frozenRun starts `precog run` and freezes it (SIGSTOP) once it committed
// its first shard, so a test can restart a store under it deterministically.
func frozenRun(t *testing.T, dir string, env []string, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(precogBin, append([]string{"--state-dir", filepath.Join(dir, ".precog"), "--log-level", "debug"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	log := &strings.Builder{}
	sc := bufio.NewScanner(stderr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "shard committed") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	go func() {
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	return cmd, log
}

// TestRunRidesOutStoreRestarts: a Postgres restart and a Redis restart
// (without persistence, so Redis loses what it held) in the middle of a run:
// transient errors are retried with backoff, the shards Redis lost are found
// at stage time and recomputed, and the run completes with exact output.
func TestRunRidesOutStoreRestarts(t *testing.T) {
	pg := testservers.NewPostgres(t)
	rd := testservers.NewRedis(t)
	dir := workdir(t)
	body := strings.NewReplacer("rows_per_shard: 1000", "rows_per_shard: 200").Replace(rankerSpec) +
		"  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: scores }\n" +
		"  redis: { addr: \"${TEST_REDIS_ADDR}\", namespace: scores, ttl: 1h }\n"
	spec := writeSpec(t, dir, "job.yaml", body)
	env := []string{"TEST_DATABASE_URL=" + pg.DSN, "TEST_REDIS_ADDR=" + rd.Addr}
	cmd, log := frozenRun(t, dir, env, "run", spec, "--param", "date=2026-11-01", "--parallel", "1", "--no-progress")

	// Postgres goes down while the run goes on, and comes back 1.5 s later.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}()
	pg.Restart(t, 1500*time.Millisecond)
	// Redis restarts empty while the run is frozen again.
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	rd.Stop()
	_ = cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(time.Second)
	rd.Start()

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run did not ride out the restarts: %v\n%s", err, log.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("run still going after 2 minutes\n%s", log.String())
	}

	want := expectedScores(t, usersData, 0)
	if got := readScores(t, filepath.Join(dir, "out", "scores", "date=2026-11-01")); len(got) != len(want) {
		t.Errorf("parquet: %d keys, want %d", len(got), len(want))
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT user_id) FROM scores").Scan(&n, &distinct); err != nil || n != len(want) || distinct != n {
		t.Errorf("postgres: %d rows, %d keys (%v), want %d", n, distinct, err, len(want))
	}
	rc := rd.Client(t)
	cur, err := rc.Get(ctx, "scores:current").Result()
	if err != nil {
		t.Fatalf("redis current: %v\n%s", err, log.String())
	}
	missing := 0
	for key := range want {
		if rc.Exists(ctx, fmt.Sprintf("scores:%s:%s", cur, key)).Val() != 1 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("redis version %s misses %d of %d keys", cur, missing, len(want))
	}
	if !strings.Contains(log.String(), "transient error") && !strings.Contains(log.String(), "recomputing") {
		t.Errorf("the log shows no retry or recompute; did the restarts happen mid-run?\n%s", log.String())
	}
}
