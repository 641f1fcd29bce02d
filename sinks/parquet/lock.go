package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/precog-ml/precog/sinks"
)

// One writer per target: Lock holds flock(LOCK_EX) on a lock file beside
// the target directory (<parent>/.<base>.precog.lock, outside what is
// published). The kernel drops the lock with the last descriptor, so a
// writer killed with SIGKILL never leaves a stale lock behind. The file
// holds the holder as JSON, for the error a second writer gets.

// lockWait bounds how long a refused writer waits for the holder to finish
// writing its JSON into a just-created lock file.
const lockWait = time.Second

// Lock takes the target's lock for holder, after checking that precog may
// write the target at all (a *sinks.NotOwnedError, with nothing created).
// A target held by another writer (another process or another Sink value)
// is a *sinks.LockedError naming it.
func (s *Sink) Lock(ctx context.Context, run sinks.RunInfo, holder sinks.Holder) (sinks.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := s.dirs(run)
	if err != nil {
		return nil, err
	}
	if err := checkOwned(d.target, run.Job); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.parent, 0o755); err != nil {
		return nil, fmt.Errorf("parquet: lock %s: %w", d.target, err)
	}
	for {
		f, err := os.OpenFile(d.lock, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("parquet: lock %s: %w", d.target, err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, &sinks.LockedError{Sink: "parquet", Target: d.target, Holder: readHolder(ctx, d.lock)}
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("parquet: lock %s: flock %s: %w", d.target, d.lock, err)
		}
		// A releasing holder unlinks the file while still locking it: the
		// lock we got is on a removed file then; open the path again.
		if same, err := samePath(f, d.lock); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("parquet: lock %s: %w", d.target, err)
			}
			continue
		}
		if err := writeHolder(f, holder); err != nil {
			f.Close()
			return nil, fmt.Errorf("parquet: lock %s: write %s: %w", d.target, d.lock, err)
		}
		return &dirLock{f: f, path: d.lock, lost: make(chan struct{})}, nil
	}
}

// samePath reports whether f is still the file at path.
func samePath(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

func writeHolder(f *os.File, h sinks.Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		return err
	}
	return f.Sync()
}

// readHolder reads the holder from a lock file someone else holds, waiting
// briefly for a holder that has locked it but not yet written it. What
// cannot be read is left zero: the refusal stands either way.
func readHolder(ctx context.Context, path string) sinks.Holder {
	deadline := time.Now().Add(lockWait)
	for {
		var h sinks.Holder
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &h) == nil {
			return h
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dirLock is a held flock. It is never lost while the process lives: the
// kernel keeps it until Release or exit.
type dirLock struct {
	mu   sync.Mutex
	f    *os.File
	path string
	lost chan struct{}
}

// Lost never fires: a flock cannot be taken over while held.
func (l *dirLock) Lost() <-chan struct{} { return l.lost }

// Release removes the lock file while still holding the lock (so a writer
// waiting on the old file notices and retries), then unlocks. Idempotent.
func (l *dirLock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	rmErr := os.Remove(l.path)
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	if rmErr != nil {
		return fmt.Errorf("parquet: release lock %s: %w", l.path, rmErr)
	}
	if err != nil {
		return fmt.Errorf("parquet: release lock %s: %w", l.path, err)
	}
	return nil
}
