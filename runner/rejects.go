package runner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/precog-ml/precog/jobs"
)

// rejectFile collects one shard attempt's rejected rows as JSON lines
// ({"key","position","reason"}) in a temporary file, renamed into place on
// commit so a retried shard replaces its earlier rejects instead of adding to
// them. The file is created on the first reject only. It also keeps the
// first jobs.RejectSampleCap rejects (clipped by jobs.NewReject) in memory:
// the sample the attempt commits to the ledger, which `status` shows
// wherever the shard ran.
type rejectFile struct {
	path   string
	shard  int
	tmp    *os.File
	w      *bufio.Writer
	enc    *json.Encoder
	sample []jobs.Reject
}

func newRejectFile(dir string, shard int) *rejectFile {
	return &rejectFile{path: filepath.Join(dir, fmt.Sprintf("shard-%05d.jsonl", shard)), shard: shard}
}

type rejectLine struct {
	Key      string `json:"key"`
	Position string `json:"position"`
	Reason   string `json:"reason"`
}

// Reject implements RejectWriter.
func (f *rejectFile) Reject(key, position, reason string) error {
	if len(f.sample) < jobs.RejectSampleCap {
		f.sample = append(f.sample, jobs.NewReject(f.shard, key, position, reason))
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
