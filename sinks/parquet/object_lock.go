package parquet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/sinks"
)

// objectLockRecord is the content of T/_PRECOG.lock.
type objectLockRecord struct {
	Holder  sinks.Holder `json:"holder"`
	Token   string       `json:"token"`
	Expires time.Time    `json:"expires"`
}

// objectLock is a held lock object, renewed every third of its lease
// (the holder's, else sinks.DefaultLockLease) until released.
type objectLock struct {
	t     objectTarget
	rec   objectLockRecord
	etag  string // of the lock object as this holder last wrote it (S3); renewal replaces only that
	lease time.Duration
	sink  *ObjectSink
	once  sync.Once // Release
	// Lease renews the lock every lease/3 and trusts a renewal until
	// lease/6 before the expiry it wrote (a taker reads that expiry on its
	// own clock).
	*sinks.Lease
}

// Lock creates the target's lock object if none exists (a conditional
// write: of two writers one wins); a lock whose lease lapsed is taken
// over (see takeOver: on S3 a compare-and-swap, so of several takers one
// wins). A live one is a *sinks.LockedError naming its holder.
func (s *ObjectSink) Lock(ctx context.Context, run sinks.RunInfo, holder sinks.Holder) (sinks.Lock, error) {
	t, err := s.target(ctx, run)
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	lease := holder.Lease
	if lease <= 0 {
		lease = sinks.DefaultLockLease
	}
	for attempt := 0; attempt < 3; attempt++ {
		start := time.Now()
		rec := objectLockRecord{Holder: holder, Token: hex.EncodeToString(tok[:]), Expires: start.Add(lease)}
		body, _ := json.Marshal(rec)
		err := t.b.Write(ctx, t.lock(), bytes.NewReader(body), objstore.WriteOptions{IfNotExist: true, ContentType: "application/json"})
		etag := ""
		if objstore.PreconditionFailed(err) {
			var cur objectLockRecord
			var ok bool
			cur, etag, ok, err = readLock(ctx, t)
			if err != nil {
				return nil, err
			}
			if ok && time.Now().Before(cur.Expires) {
				return nil, &sinks.LockedError{Sink: "parquet", Target: t.url(), Holder: cur.Holder}
			}
			// Lapsed (its holder is gone or frozen, and is fenced at its
			// next renewal or publish) or just released: take it over.
			etag, err = takeOver(ctx, t, ok, etag, body)
			if objstore.PreconditionFailed(err) || objstore.NotFound(err) {
				continue // another writer changed it first; look again
			}
		} else if err != nil {
			return nil, writeRefused(t, err)
		}
		if err != nil {
			return nil, err
		}
		if etag == "" {
			var mine bool
			if etag, mine, err = createdETag(ctx, t, rec.Token); err != nil {
				return nil, err
			} else if !mine {
				continue
			}
		}
		l := &objectLock{t: t, rec: rec, etag: etag, lease: lease, sink: s}
		l.Lease = sinks.StartLease(start, sinks.LeaseParams{TTL: lease, Margin: lease / 6, Renew: l.renewOnce,
			OnLost: func(why string) {
				slog.Error("parquet lock lost: stop writing", "lock", t.loc.ObjectURL(t.lock()), "why", why)
			},
			OnRetry: func(err error) {
				slog.Warn("parquet lock renewal failed; retrying", "lock", t.loc.ObjectURL(t.lock()), "err", err)
			}})
		s.mu.Lock()
		s.locks[t.url()] = l
		s.mu.Unlock()
		return l, nil
	}
	return nil, fmt.Errorf("parquet sink: could not take the lock %s", t.loc.ObjectURL(t.lock()))
}

// takeOver replaces a lapsed lock object (read with etag; absent when
// !exists) with body. On S3 it is one conditional PUT (If-Match: etag),
// so of several writers taking over the same lapsed lock exactly one
// wins; the others get PreconditionFailed. On GCS and Azure, whose
// equivalents (generation preconditions, If-Match) gocloud exposes only
// through As hooks no test server here can exercise, it is delete then
// create-if-absent, a read-check-write whose race the renewal's token
// check narrows but does not close. It returns the new ETag ("" off S3).
func takeOver(ctx context.Context, t objectTarget, exists bool, etag string, body []byte) (string, error) {
	if exists && t.b.CanWriteIfMatch() {
		return t.b.WriteIfMatch(ctx, t.lock(), body, etag, "application/json")
	}
	if exists {
		if err := t.b.Delete(ctx, t.lock()); err != nil {
			return "", fmt.Errorf("parquet sink: %w", err)
		}
	}
	err := t.b.Write(ctx, t.lock(), bytes.NewReader(body), objstore.WriteOptions{IfNotExist: true, ContentType: "application/json"})
	if err != nil && !objstore.PreconditionFailed(err) {
		return "", writeRefused(t, err)
	}
	return "", err
}

// createdETag is the ETag of the lock object this holder just created
// (gocloud's writer does not return it), read back on S3, where renewal
// replaces only that version. ok is false when the object read is not
// this holder's (taken over at once): the caller looks again.
func createdETag(ctx context.Context, t objectTarget, token string) (etag string, ok bool, err error) {
	if !t.b.CanWriteIfMatch() {
		return "", true, nil
	}
	cur, etag, exists, err := readLock(ctx, t)
	if err != nil {
		return "", false, err
	}
	return etag, exists && cur.Token == token, nil
}

// readLockAttempts bounds the reads of a lock object that fail: a read
// racing a writer's replacement can fail its checksum (the body is the new
// version's, the checksum the old one's on some S3-compatible servers),
// and reading it again sees one version whole.
const readLockAttempts = 4

// readLock reads the lock object and the ETag of the content read.
func readLock(ctx context.Context, t objectTarget) (objectLockRecord, string, bool, error) {
	var buf bytes.Buffer
	var a objstore.Attrs
	var err error
	for attempt := range readLockAttempts {
		if attempt > 0 {
			if werr := backoff(ctx, attempt); werr != nil {
				break
			}
		}
		buf.Reset()
		if a, err = t.b.Download(ctx, t.lock(), &buf, maxPointerBytes); err == nil || objstore.NotFound(err) {
			break
		}
	}
	if objstore.NotFound(err) {
		return objectLockRecord{}, "", false, nil
	}
	if err != nil {
		return objectLockRecord{}, "", false, fmt.Errorf("parquet sink: %w", err)
	}
	var rec objectLockRecord
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		return objectLockRecord{}, "", false, fmt.Errorf("parquet sink: %s: %w", t.loc.ObjectURL(t.lock()), err)
	}
	return rec, a.ETag, true, nil
}

// backoff waits before retry attempt (1-based): full jitter over an
// exponential window from 20 ms.
func backoff(ctx context.Context, attempt int) error {
	t := time.NewTimer(mrand.N(20*time.Millisecond<<attempt) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// renewOnce extends the lease by one lease from now. On S3 it is one
// conditional PUT on the ETag this holder last wrote, so a holder whose
// lock was taken over (its ETag changed) fails and is fenced, and can
// never overwrite the new holder's lock. Elsewhere it is check then write
// (see takeOver). A lock taken over is lost (sinks.ErrLeaseGone). Only
// the lease's renewer calls it once Lock returned.
func (l *objectLock) renewOnce(ctx context.Context) error {
	rec := l.rec
	rec.Expires = time.Now().Add(l.lease)
	body, _ := json.Marshal(rec)
	if l.t.b.CanWriteIfMatch() {
		etag, err := l.t.b.WriteIfMatch(ctx, l.t.lock(), body, l.etag, "application/json")
		if objstore.PreconditionFailed(err) || objstore.NotFound(err) {
			err = fmt.Errorf("parquet sink: the lock on %s was taken over; this writer is fenced: %w", l.t.url(), err)
			l.MarkLost(err.Error())
			return fmt.Errorf("%w: %w", sinks.ErrLeaseGone, err)
		}
		if err != nil {
			return fmt.Errorf("parquet sink: renewing the lock: %w", err)
		}
		l.etag = etag
		return nil
	}
	if err := l.check(ctx); err != nil {
		return err
	}
	return l.t.b.Write(ctx, l.t.lock(), bytes.NewReader(body), objstore.WriteOptions{ContentType: "application/json"})
}

// check fails when the lock object is no longer this holder's.
func (l *objectLock) check(ctx context.Context) error {
	cur, _, ok, err := readLock(ctx, l.t)
	if err != nil {
		return err
	}
	if !ok || cur.Token != l.rec.Token {
		why := fmt.Sprintf("parquet sink: the lock on %s was taken over; this writer is fenced", l.t.url())
		l.MarkLost(why)
		return fmt.Errorf("%w: %s", sinks.ErrLeaseGone, why)
	}
	return nil
}

// fenced fails when this sink holds the target's lock and lost it.
func (s *ObjectSink) fenced(ctx context.Context, t objectTarget) error {
	s.mu.Lock()
	l := s.locks[t.url()]
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.check(ctx)
}

// Release stops renewing and deletes the lock object if it is still this
// holder's. Idempotent.
func (l *objectLock) Release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.Stop()
		l.sink.mu.Lock()
		if l.sink.locks[l.t.url()] == l {
			delete(l.sink.locks, l.t.url())
		}
		l.sink.mu.Unlock()
		cur, _, ok, rerr := readLock(ctx, l.t)
		if rerr != nil {
			err = rerr
			return
		}
		if ok && cur.Token == l.rec.Token {
			err = l.t.b.Delete(ctx, l.t.lock())
		}
	})
	return err
}
