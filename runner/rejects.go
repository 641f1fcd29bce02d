package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// rejectFile collects one shard attempt's rejected rows: in memory, up to
// keep of them, for the ledger to store with the commit (Ledger.Complete;
// the ledger is where a run's rejects live, whatever machine ran the
// shard), and, when path is set (`precog run`), as JSON lines
// ({"key","position","reason"}) in a temporary file, renamed into place on
// commit so a retried shard replaces its earlier rejects instead of adding
// to them. The file is created on the first reject only.
type rejectFile struct {
	path   string
	shard  int
	keep   int
	tmp    *os.File
	w      *bufio.Writer
	enc    *json.Encoder
	sample []jobs.Reject
}

// newRejectFile collects shard's rejects, keeping up to keep in memory
// (at least jobs.RejectSampleCap); dir "" writes no file.
func newRejectFile(dir string, shard, keep int) *rejectFile {
	f := &rejectFile{shard: shard, keep: max(keep, jobs.RejectSampleCap)}
	if dir != "" {
		f.path = filepath.Join(dir, fmt.Sprintf("shard-%05d.jsonl", shard))
	}
	return f
}

type rejectLine struct {
	Key      string `json:"key"`
	Position string `json:"position"`
	Reason   string `json:"reason"`
}

// Reject implements RejectWriter.
func (f *rejectFile) Reject(key, position, reason string) error {
	if len(f.sample) < f.keep {
		f.sample = append(f.sample, jobs.NewReject(f.shard, key, position, reason))
	}
	if f.path == "" {
		return nil
	}
	if f.tmp == nil {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".tmp-*")
		if err != nil {
			return err
		}
		f.tmp = tmp
		f.w = bufio.NewWriter(tmp)
		f.enc = json.NewEncoder(f.w)
	}
	return f.enc.Encode(rejectLine{Key: key, Position: position, Reason: reason})
}

// commit publishes the attempt's rejects, replacing an earlier attempt's;
// with no rejects it removes any earlier file.
func (f *rejectFile) commit() error {
	if f.path == "" {
		return nil
	}
	if f.tmp == nil {
		if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	if err := f.w.Flush(); err != nil {
		f.abort()
		return err
	}
	if err := f.tmp.Sync(); err != nil {
		f.abort()
		return err
	}
	if err := f.tmp.Close(); err != nil {
		os.Remove(f.tmp.Name())
		return err
	}
	return os.Rename(f.tmp.Name(), f.path)
}

func (f *rejectFile) abort() {
	if f.tmp != nil {
		f.tmp.Close()
		os.Remove(f.tmp.Name())
		f.tmp = nil
	}
}

// RejectsPage is how many rows `precog rejects` reads from the ledger at a
// time, so that a run's 100k stored rejects stream instead of loading at once.
const RejectsPage = 5000

// EachReject reads a run's stored rejects page by page into emit, at
// most limit (0: all); it returns how many it emitted, how many the ledger
// stores and its cap.
func EachReject(ctx context.Context, rj ledger.Rejects, runID string, limit int, emit func(jobs.Reject) error) (n int, stored int64, cap int, err error) {
	for {
		size := RejectsPage
		if limit > 0 {
			size = min(size, limit-n)
		}
		if size == 0 {
			return n, stored, cap, nil
		}
		p, err := rj.Rejects(ctx, runID, n, size)
		if err != nil {
			return n, stored, cap, fmt.Errorf("rejects of run %s: %w", runID, err)
		}
		stored, cap = p.Stored, p.Cap
		for _, r := range p.Rows {
			if err := emit(r); err != nil {
				return n, stored, cap, err
			}
			n++
		}
		if len(p.Rows) < size {
			return n, stored, cap, nil
		}
	}
}

// RejectsShort says why a listing of a run's rejects (EachReject, at most
// limit rows; 0: all) holds fewer rows than the run rejected: the limit,
// or the ledger's bounded store (the rest were counted, not stored). It
// is "" when the listing holds every one.
func RejectsShort(listed int, stored, rejected int64, limit int) string {
	if int64(listed) >= rejected {
		return ""
	}
	why := "--limit"
	if stored < rejected && (limit == 0 || int64(limit) > stored) {
		why = "the ledger stores a bounded number of rejected rows per run (precog worker --max-stored-rejects, default " +
			strconv.Itoa(ledger.DefaultRejectsPerRun) + "); the rest were counted, not stored"
	}
	return fmt.Sprintf("listed %d of the run's %d rejected rows (%d stored): %s", listed, rejected, stored, why)
}
