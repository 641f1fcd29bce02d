package parquet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/precog-ml/precog/sinks"
)

// The writer lock of a target is a lease with fencing, kept beside the
// target in <parent>/.<base>.precog.lock/, outside what is published:
//
//	.recs.precog.lock/00000000000000000007.precog.lock   the current lease record
//
// One record file per holder epoch, named by the epoch (zero-padded, so
// names sort as numbers); only the highest epoch counts. A record holds
// the holder, a random token, the epoch and the lease's expiry, as JSON
// padded to a fixed size so that a renewal rewrites it in place.
//
// Taking the lease writes the next epoch's record into a temporary file,
// flocks it and hard-links it to its epoch name: link(2) fails when the name
// exists, so of several contenders exactly one wins an epoch, on a local
// filesystem and on NFS alike. The highest record may be taken when it is
// released, expired (its expiry passed on the taker's clock), written by
// an earlier process of the same run (a run is resumed or published by one
// process at a time: the ledger decides), or when its flock is free (its
// process is gone: a killed writer frees the target at once on the machine
// that ran it). The winner then removes the lower epochs; the highest is
// never removed, only marked released, so epochs only grow.
//
// The holder renews its record every third of the lease, rewriting it in
// place. A taker measures the lapse on the filesystem's clock (the
// record's modification time against a probe file's, lapsed), so machines
// sharing the directory over NFS need not agree on the time; a holder
// whose renewals stop (frozen, cut off) stops itself on its own monotonic
// clock, lease/6 before its lease can lapse. Fencing: before every step that
// changes the target (a commit, Stage, Publish, Rollback, Abort) the sink
// checks that its lease is still the highest epoch, still its token and not
// past its end (fence); a stale holder, once awake, changes nothing.

// lockDirSuffix names the lease directory beside the target.
const lockDirSuffix = ".precog.lock"

// recordSize is the fixed size of a lease record, so that a renewal
// overwrites it in place (a torn read is unparsable and counts as held).
const recordSize = 1024

// lockRecord is a lease record.
type lockRecord struct {
	Holder   sinks.Holder `json:"holder"`
	Token    string       `json:"token"`
	Epoch    int64        `json:"epoch"`
	Expires  time.Time    `json:"expires"`
	Released bool         `json:"released,omitempty"`
}

// ErrFenced marks a step refused because this process's lease on the
// target lapsed or was taken over: another writer owns the target now.
var ErrFenced = errors.New("parquet writer lease lost")

func lockDir(target string) string {
	return filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+lockDirSuffix)
}

func epochName(e int64) string { return fmt.Sprintf("%020d%s", e, lockDirSuffix) }

// parseEpoch is the epoch a record file's name holds.
func parseEpoch(name string) (int64, bool) {
	num, ok := strings.CutSuffix(name, lockDirSuffix)
	if !ok || len(num) != 20 {
		return 0, false
	}
	e, err := strconv.ParseInt(num, 10, 64)
	return e, err == nil && e > 0
}

// Lock takes the target's lease for holder (holder.Lease long, the sink's
// default when 0), after checking that precog may write the target at all
// (a *sinks.NotOwnedError, with nothing created). A target another writer
// holds is a *sinks.LockedError naming it.
func (s *Sink) Lock(ctx context.Context, run sinks.RunInfo, holder sinks.Holder) (sinks.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	target, err := s.Target(run)
	if err != nil {
		return nil, err
	}
	if err := checkOwned(target, run.Job); err != nil {
		return nil, err
	}
	dir := lockDir(target)
	if err := makeLockDir(ctx, target, dir); err != nil {
		return nil, err
	}
	lease := holder.Lease
	if lease <= 0 {
		lease = s.lease
	}
	holder.Lease = lease
	for range 5 { // contenders may pass each other; each round is one epoch
		top, rec, err := highest(dir)
		if err != nil {
			return nil, fmt.Errorf("parquet: lock %s: %w", target, err)
		}
		if top > 0 {
			if why, ok := takeable(dir, top, rec, run); !ok {
				var h sinks.Holder
				if rec != nil {
					h = rec.Holder
				}
				return nil, &sinks.LockedError{Sink: "parquet", Target: target, Holder: h}
			} else if why != "" {
				slog.Info("parquet: taking over the target's writer lease", "target", target, "epoch", top+1, "why", why)
			}
		}
		l, err := claim(dir, top+1, holder, lease)
		if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
			continue // another contender took that epoch
		}
		if err != nil {
			return nil, fmt.Errorf("parquet: lock %s: %w", target, err)
		}
		if now, _, err := highest(dir); err != nil || now != l.epoch {
			// Someone went past us meanwhile (we linked an epoch its
			// holder had already removed): ours never counted.
			if err == nil && now > l.epoch {
				os.Remove(l.path)
			}
			l.f.Close()
			continue
		}
		removeBelow(dir, l.epoch)
		l.sink, l.target, l.version = s, target, run.Version
		l.Lease = sinks.StartLease(l.claimed, sinks.LeaseParams{TTL: lease, Margin: lease / 6, Renew: l.renew,
			OnLost: func(why string) {
				slog.Error("parquet target lease lost: stop writing", "target", l.target, "epoch", l.epoch, "why", why)
			},
			OnRetry: func(err error) { slog.Warn("parquet lease renewal failed; retrying", "target", l.target, "err", err) }})
		s.hold(l)
		return l, nil
	}
	return nil, fmt.Errorf("parquet: lock %s: the lease changed hands too fast to take", target)
}

// makeLockDir creates the lease directory. A lock file of an earlier
// precog (a flock on <parent>/.<base>.precog.lock) is a *sinks.LockedError
// while a process holds it, and is replaced when none does.
func makeLockDir(ctx context.Context, target, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("parquet: lock %s: %w", target, err)
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode().IsRegular() {
		f, err := os.Open(dir)
		if err != nil {
			return fmt.Errorf("parquet: lock %s: %w", target, err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return &sinks.LockedError{Sink: "parquet", Target: target, Holder: legacyHolder(ctx, dir)}
		}
		if err == nil {
			os.Remove(dir)
		}
		f.Close()
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("parquet: lock %s: %w", target, err)
	}
	return nil
}

// legacyHolder reads the holder an earlier precog wrote into its lock file.
func legacyHolder(ctx context.Context, path string) sinks.Holder {
	var h sinks.Holder
	for range 10 {
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &h) == nil {
			break
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h
}

// highest returns the highest epoch in dir and its record (nil when it
// cannot be parsed: a torn read of a renewal, or a writer killed while it
// wrote). 0 when dir holds no record.
func highest(dir string) (int64, *lockRecord, error) {
	var top int64
	for range 5 { // a record removed while read was taken over: list again
		names, err := readNames(dir)
		if err != nil {
			return 0, nil, err
		}
		top = 0
		for _, n := range names {
			if e, ok := parseEpoch(n); ok && e > top {
				top = e
			}
		}
		if top == 0 {
			return 0, nil, nil
		}
		gone := false
		for range 3 {
			rec, err := readRecord(filepath.Join(dir, epochName(top)))
			if err == nil {
				return top, rec, nil
			}
			if gone = errors.Is(err, fs.ErrNotExist); gone {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !gone {
			return top, nil, nil // unreadable: counts as held
		}
	}
	return top, nil, nil
}

func readRecord(path string) (*lockRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r lockRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// takeable says whether the record of epoch top may be taken over, and why
// ("" when it was released in order).
func takeable(dir string, top int64, rec *lockRecord, run sinks.RunInfo) (string, bool) {
	switch {
	case rec != nil && rec.Released:
		return "", true
	case rec != nil && rec.Holder.RunID == run.RunID && run.RunID != "":
		return "an earlier process of the same run held it", true
	case rec != nil && lapsed(dir, top, rec):
		return fmt.Sprintf("the lease of %s lapsed (not renewed within %s)", rec.Holder, rec.Holder.Lease), true
	}
	if flockFree(filepath.Join(dir, epochName(top))) {
		return "its holder's process is gone", true
	}
	return "", false
}

// lapsed reports whether the record of epoch top went unrenewed for longer
// than its lease. Both times come from the filesystem's clock: the record
// file's modification time (its last renewal's write) and that of a probe
// file written now. On NFS the server sets both, so machines sharing the
// directory need not agree on the time; locally it is the machine's clock.
// A record without a lease falls back to the expiry it names.
func lapsed(dir string, top int64, rec *lockRecord) bool {
	if rec.Holder.Lease <= 0 {
		return time.Now().After(rec.Expires)
	}
	fi, err := os.Stat(filepath.Join(dir, epochName(top)))
	if err != nil {
		return false
	}
	now, err := fsNow(dir)
	if err != nil {
		return false
	}
	return now.Sub(fi.ModTime()) > rec.Holder.Lease
}

// fsNow is the filesystem's time now: the modification time of a probe
// file written into dir (and removed).
func fsNow(dir string) (time.Time, error) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	p := filepath.Join(dir, "tmp-probe-"+hex.EncodeToString(tok[:]))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return time.Time{}, err
	}
	defer os.Remove(p)
	_, werr := f.Write([]byte{'\n'})
	cerr := f.Close()
	if werr != nil || cerr != nil {
		return time.Time{}, errors.Join(werr, cerr)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// flockFree reports whether no process holds the record file's flock (its
// holder exited or was killed). Errors count as held.
func flockFree(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
		return false
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return true
}

// claim writes epoch's record for holder into a flocked temporary file and
// links it to the epoch's name: fs.ErrExist when another contender has it.
func claim(dir string, epoch int64, holder sinks.Holder, lease time.Duration) (*leaseLock, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(tok[:])
	tmp := filepath.Join(dir, "tmp-"+token)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", tmp, err)
	}
	l := &leaseLock{f: f, path: filepath.Join(dir, epochName(epoch)), dir: dir, epoch: epoch, lease: lease,
		rec: lockRecord{Holder: holder, Token: token, Epoch: epoch}}
	start := time.Now()
	if err := l.write(start); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Link(tmp, l.path); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	l.claimed = start
	return l, nil
}

// removeBelow removes the records of epochs below epoch, and temporary
// files older than a minute (left by contenders killed mid-claim).
func removeBelow(dir string, epoch int64) {
	names, _ := readNames(dir)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if e, ok := parseEpoch(n); ok && e < epoch {
			os.Remove(p)
		} else if strings.HasPrefix(n, "tmp-") {
			if fi, err := os.Lstat(p); err == nil && time.Since(fi.ModTime()) > time.Minute {
				os.Remove(p)
			}
		}
	}
}

// leaseLock is a held lease and its renewer.
type leaseLock struct {
	sink    *Sink
	target  string
	version string // the run's version: the steps of that run are fenced by it
	f       *os.File
	path    string
	dir     string
	epoch   int64
	lease   time.Duration

	mu  sync.Mutex // guards rec and writes to f
	rec lockRecord
	// claimed is when the claim that took the lease began.
	claimed time.Time
	// Lease renews the lease every lease/3 and trusts a renewal until
	// lease/6 before the expiry it wrote (monotonic): a holder whose
	// renewals stop stops itself before a taker may take over.
	*sinks.Lease

	relMu    sync.Mutex
	released bool
}

// write rewrites the record in place with an expiry of start + lease.
func (l *leaseLock) write(start time.Time) error {
	l.mu.Lock()
	l.rec.Expires = start.Add(l.lease).UTC()
	l.mu.Unlock()
	return l.writeRaw()
}

// writeRaw rewrites the record as it is, padded to recordSize, and syncs it.
func (l *leaseLock) writeRaw() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := json.Marshal(l.rec)
	if err != nil {
		return err
	}
	if len(b) >= recordSize {
		return fmt.Errorf("lease record of %d bytes is longer than %d", len(b), recordSize)
	}
	buf := make([]byte, recordSize)
	copy(buf, b)
	for i := len(b); i < recordSize-1; i++ {
		buf[i] = ' '
	}
	buf[recordSize-1] = '\n'
	if _, err := l.f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	return l.f.Sync()
}

// check returns nil while the lease holds: not past its end on this
// process's clock, still the highest epoch, still this holder's token.
// Otherwise it marks the lease lost and returns an error wrapping
// ErrFenced.
func (l *leaseLock) check() error {
	select {
	case <-l.Lost():
		return fmt.Errorf("parquet: target %s: %w", l.target, ErrFenced)
	default:
	}
	why := ""
	if time.Now().After(l.Until()) {
		why = fmt.Sprintf("not renewed in time (its lease is %s)", l.lease)
	} else if top, rec, err := highest(l.dir); err != nil {
		why = fmt.Sprintf("cannot read the lease: %v", err)
	} else if top != l.epoch {
		why = fmt.Sprintf("taken over (epoch %d, ours %d)", top, l.epoch)
	} else if rec != nil && (rec.Token != l.rec.Token || rec.Released) {
		why = "the lease record is not ours any more"
	}
	if why == "" {
		return nil
	}
	l.MarkLost(why)
	return fmt.Errorf("parquet: target %s: %s: %w", l.target, why, ErrFenced)
}

// renew extends the lease once (sinks.LeaseParams.Renew) while check
// finds it this holder's; one taken over is sinks.ErrLeaseGone.
func (l *leaseLock) renew(context.Context) error {
	if err := l.check(); err != nil {
		return fmt.Errorf("%w: %w", sinks.ErrLeaseGone, err)
	}
	return l.write(time.Now())
}

// Release stops renewing, marks the record released if it is still ours
// (never another holder's), and drops the flock. Idempotent.
func (l *leaseLock) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return nil
	}
	l.Stop()
	l.released = true
	if l.sink != nil {
		l.sink.unhold(l)
	}
	var err error
	if l.check() == nil {
		l.mu.Lock()
		l.rec.Released = true
		l.mu.Unlock()
		err = l.write(time.Now())
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("parquet: release lock %s: %w", l.path, err)
	}
	return nil
}

// hold registers a lease this Sink holds, so that its steps are fenced.
func (s *Sink) hold(l *leaseLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[l.target] = l
}

func (s *Sink) unhold(l *leaseLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[l.target] == l {
		delete(s.held, l.target)
	}
}

// fence returns nil unless this Sink took the lease of run's target for
// run's version and that lease no longer holds: then the step must not
// happen (an error wrapping ErrFenced). Steps of runs this Sink holds no
// lease for are not fenced here: cluster shard writers write without the
// lock, fenced by the ledger, into staging only.
func (s *Sink) fence(target string, run sinks.RunInfo) error {
	s.mu.Lock()
	l := s.held[target]
	s.mu.Unlock()
	if l == nil || l.version != run.Version {
		return nil
	}
	return l.check()
}
