package parquet

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func wantLocked(t *testing.T, err error, holder sinks.Holder, target string) {
	t.Helper()
	var le *sinks.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("Lock = %v, want a *sinks.LockedError", err)
	}
	if le.Holder.PID != holder.PID || le.Holder.RunID != holder.RunID || le.Holder.Host != holder.Host || le.Target != target {
		t.Fatalf("LockedError = %+v, want holder %+v on %s", le, holder, target)
	}
}

// TestLockTwoSinksOneProcess: two Sink values of one process (two runners)
// exclude each other; the lock file lives beside the target, not in it.
func TestLockTwoSinksOneProcess(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "out", "recs")
	a := newSink(t, jobs.ParquetSinkSpec{Path: target})
	b := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1, run2 := sinktest.NewRun("v1", false, nil), sinktest.NewRun("v2", false, nil)
	h1 := sinks.ThisProcess(run1)
	l1, err := a.Lock(ctx, run1, h1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Lock(ctx, run2, sinks.ThisProcess(run2))
	wantLocked(t, err, h1, target)
	if _, err := os.Stat(filepath.Join(filepath.Dir(target), ".recs.precog.lock")); err != nil {
		t.Fatalf("lock file: %v", err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("Lock created the target directory")
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.Lock(ctx, run2, sinks.ThisProcess(run2))
	if err != nil {
		t.Fatalf("Lock after Release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Only the lease directory stays, its one record released.
	if names, err := readNames(filepath.Dir(target)); err != nil || len(names) != 1 || names[0] != ".recs"+lockDirSuffix {
		t.Fatalf("left beside the target after Release: %v (%v)", names, err)
	}
	top, rec, err := highest(lockDir(target))
	if err != nil || rec == nil || !rec.Released || top != 2 {
		t.Fatalf("lease record after Release: epoch %d %+v (%v), want epoch 2 released", top, rec, err)
	}
}

// lockHelperEnv names the target a helper process locks; see
// TestLockHelperProcess.
const lockHelperEnv = "PRECOG_PARQUET_LOCK_HELPER"

// TestLockHelperProcess is not a test: run by TestLockAcrossProcesses as a
// second process, it takes the lock, says "locked" and holds it until
// killed.
func TestLockHelperProcess(t *testing.T) {
	target := os.Getenv(lockHelperEnv)
	if target == "" {
		t.Skip("helper process of TestLockAcrossProcesses")
	}
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run := sinktest.NewRun("helper", false, nil)
	if _, err := s.Lock(context.Background(), run, sinks.ThisProcess(run)); err != nil {
		t.Fatalf("helper Lock: %v", err)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute)
	t.Fatal("helper was not killed")
}

// TestLockAcrossProcesses: another process holding the target refuses this
// one, naming it; once it is killed with SIGKILL the kernel has dropped its
// lock and this process takes the target despite the lock file left behind.
func TestLockAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+target)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper said %q (%v), want locked", line, err)
	}

	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run := sinktest.NewRun("v1", false, nil)
	_, err = s.Lock(ctx, run, sinks.ThisProcess(run))
	helper := sinks.ThisProcess(sinktest.NewRun("helper", false, nil))
	helper.PID = cmd.Process.Pid
	wantLocked(t, err, helper, target)

	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(filepath.Dir(target), ".recs.precog.lock")); err != nil {
		t.Fatalf("the killed holder's lock file: %v", err)
	}
	l, err := s.Lock(ctx, run, sinks.ThisProcess(run))
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
