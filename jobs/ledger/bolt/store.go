package bolt

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"

	"github.com/precog-ml/precog/jobs/ledger"
)

// LockWait is how long one transaction waits for another process's
// transaction on the same file before it fails with ledger.ErrBusy. A
// transaction lasts milliseconds; only a process frozen inside one (or a
// file held by an older precog for its whole run) outlasts it.
const LockWait = 10 * time.Second

// store is the bbolt file of a ledger, opened for each transaction and
// closed after it, so that several processes share one state directory: a
// `precog cancel` reaches a run a `precog backfill` is executing, and runs
// of different jobs go on at once. bbolt's file lock (exclusive for
// writes, shared for reads) serialises the processes' transactions; a
// mutex per file serialises this process's, whatever Ledger value they
// go through.
type store struct {
	path   string
	wait   time.Duration
	mu     *sync.Mutex
	closed atomic.Bool // set by Ledger.Close: a closed ledger reads and writes nothing
}

// fileLocks holds one mutex per ledger file of this process.
var fileLocks sync.Map // absolute path → *sync.Mutex

func newStore(path string, wait time.Duration) (*store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	mu, _ := fileLocks.LoadOrStore(abs, &sync.Mutex{})
	return &store{path: abs, wait: wait, mu: mu.(*sync.Mutex)}, nil
}

// Update runs fn in a read-write transaction of the file.
func (s *store) Update(fn func(*bbolt.Tx) error) error {
	return s.with(false, func(db *bbolt.DB) error { return db.Update(fn) })
}

// View runs fn in a read-only transaction of the file.
func (s *store) View(fn func(*bbolt.Tx) error) error {
	return s.with(true, func(db *bbolt.DB) error { return db.View(fn) })
}

func (s *store) with(readOnly bool, fn func(*bbolt.DB) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("ledger: %s: %w", s.path, bberrors.ErrDatabaseNotOpen)
	}
	db, err := bbolt.Open(s.path, 0o600, &bbolt.Options{Timeout: s.wait, ReadOnly: readOnly})
	if errors.Is(err, bberrors.ErrTimeout) {
		return fmt.Errorf("ledger: state dir %s: another precog process held the ledger for over %s (frozen?): %w", filepath.Dir(s.path), s.wait, ledger.ErrBusy)
	}
	if err != nil {
		return fmt.Errorf("ledger: open %s: %w", s.path, err)
	}
	err = fn(db)
	if cerr := db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("ledger: close %s: %w", s.path, cerr)
	}
	return err
}
