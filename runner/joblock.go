package runner

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/precog-ml/precog/jobs/ledger"
)

// LockJob takes job's lock in the state directory for as long as this
// process runs it locally (`precog run`, a local `precog backfill`), and
// returns its release. The embedded ledger is shared by every process of
// the state directory, so runs of different jobs go on at once; a second
// process running the same job is refused with ledger.ErrBusy naming the
// holder, since a run resumed by one process must not be resumed by
// another meanwhile (the resume releases the leases it finds). The lock is
// a flock: the kernel drops it when the holder dies, kill -9 included.
func LockJob(stateDir, job string) (release func(), err error) {
	dir := filepath.Join(stateDir, "jobs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("job lock: %w", err)
	}
	path := filepath.Join(dir, url.PathEscape(job)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("job lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := string(bytes.TrimSpace(b))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("job %s is running in another precog process (pid %s) of state dir %s: wait for it, or cancel its run (precog cancel RUN): %w",
				job, pid, stateDir, ledger.ErrBusy)
		}
		return nil, fmt.Errorf("job lock %s: %w", path, err)
	}
	// Best effort: the pid only names the holder in a second process's error.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
