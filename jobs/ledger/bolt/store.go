package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
//
// The first write creates the file (and its state directory): until then
// the ledger reads as empty, so that a read-only command (runs, status,
// the dashboard) on a state directory where nothing ran creates nothing.
type store struct {
	path   string
	wait   time.Duration
	file   *fileState
	closed atomic.Bool // set by Ledger.Close: a closed ledger reads and writes nothing
	// ready: this store saw the file with its buckets.
	ready atomic.Bool
}

// fileState is what this process's Ledgers of one file share.
type fileState struct {
	mu sync.Mutex
	// snap is the snapshotter this process keeps for the file
	// (KeepSnapshots), kicked after each write transaction.
	snap atomic.Pointer[snapshotter]
}

// files holds the state of each ledger file of this process.
var files sync.Map // absolute path → *fileState

func newStore(path string, wait time.Duration) (*store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	f, _ := files.LoadOrStore(abs, &fileState{})
	return &store{path: abs, wait: wait, file: f.(*fileState)}, nil
}

// exists reports whether the file is there (a write created it).
func (s *store) exists() bool {
	_, err := os.Stat(s.path)
	return err == nil
}

// Update runs fn in a read-write transaction of the file, creating the
// file and its buckets first if need be, then kicks the snapshotter.
func (s *store) Update(fn func(*bbolt.Tx) error) error {
	err := s.with(false, func(db *bbolt.DB) error {
		return db.Update(func(tx *bbolt.Tx) error {
			if !s.ready.Load() {
				if err := createBuckets(tx); err != nil {
					return fmt.Errorf("ledger: initialise %s: %w", s.path, err)
				}
			}
			return fn(tx)
		})
	})
	if err == nil {
		s.ready.Store(true)
	}
	if sn := s.file.snap.Load(); sn != nil {
		sn.Kick()
	}
	return err
}

// View runs fn in a read-only transaction of the file; of an empty ledger
// while there is no file.
func (s *store) View(fn func(*bbolt.Tx) error) error {
	return s.with(true, func(db *bbolt.DB) error { return db.View(fn) })
}

func (s *store) with(readOnly bool, fn func(*bbolt.DB) error) error {
	s.file.mu.Lock()
	defer s.file.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("ledger: %s: %w", s.path, bberrors.ErrDatabaseNotOpen)
	}
	db, err := bbolt.Open(s.path, 0o600, &bbolt.Options{Timeout: s.wait, ReadOnly: readOnly})
	if errors.Is(err, fs.ErrNotExist) && readOnly {
		empty, err := emptyLedger()
		if err != nil {
			return err
		}
		return fn(empty)
	}
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(s.path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("ledger: create state dir %s: %w", dir, err)
		}
		db, err = bbolt.Open(s.path, 0o600, &bbolt.Options{Timeout: s.wait})
	}
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

// empty is an empty ledger (its buckets, nothing in them), which a read of
// a ledger whose file does not exist yet reads: one per process, in a
// temporary file removed once open.
var empty struct {
	once sync.Once
	db   *bbolt.DB
	err  error
}

func emptyLedger() (*bbolt.DB, error) {
	empty.once.Do(func() {
		empty.db, empty.err = openEmpty()
	})
	return empty.db, empty.err
}

func openEmpty() (*bbolt.DB, error) {
	f, err := os.CreateTemp("", "precog-empty-ledger-*.db")
	if err != nil {
		return nil, fmt.Errorf("ledger: empty ledger: %w", err)
	}
	f.Close()
	defer os.Remove(f.Name())
	db, err := bbolt.Open(f.Name(), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("ledger: empty ledger: %w", err)
	}
	if err := db.Update(createBuckets); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledger: empty ledger: %w", err)
	}
	return db, nil
}
