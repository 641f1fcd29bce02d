package parquet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	lease time.Duration
	sink  *ObjectSink
	lost  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	lostO sync.Once
}

// Lock creates the target's lock object if none exists (a conditional
// write: of two writers one wins); a lock whose lease lapsed is taken
// over. A live one is a *sinks.LockedError naming its holder.
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
		rec := objectLockRecord{Holder: holder, Token: hex.EncodeToString(tok[:]), Expires: time.Now().Add(lease)}
		body, _ := json.Marshal(rec)
		err := t.b.Write(ctx, t.lock(), bytes.NewReader(body), objstore.WriteOptions{IfNotExist: true, ContentType: "application/json"})
		if err == nil {
			l := &objectLock{t: t, rec: rec, lease: lease, sink: s, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
			s.mu.Lock()
			s.locks[t.url()] = l
			s.mu.Unlock()
			go l.renew()
			return l, nil
		}
		if !objstore.PreconditionFailed(err) {
			return nil, writeRefused(t, err)
		}
		cur, ok, err := readLock(ctx, t)
		if err != nil {
			return nil, err
		}
		if ok && time.Now().Before(cur.Expires) {
			return nil, &sinks.LockedError{Sink: "parquet", Target: t.url(), Holder: cur.Holder}
		}
		if ok {
			// Lapsed: its holder is gone or frozen, and is fenced at its
			// next renewal or publish.
			if err := t.b.Delete(ctx, t.lock()); err != nil {
				return nil, fmt.Errorf("parquet sink: %w", err)
			}
		}
	}
	return nil, fmt.Errorf("parquet sink: could not take the lock %s", t.loc.ObjectURL(t.lock()))
}

func readLock(ctx context.Context, t objectTarget) (objectLockRecord, bool, error) {
	raw, err := t.b.ReadAll(ctx, t.lock(), maxPointerBytes)
	if objstore.NotFound(err) {
		return objectLockRecord{}, false, nil
	}
	if err != nil {
		return objectLockRecord{}, false, fmt.Errorf("parquet sink: %w", err)
	}
	var rec objectLockRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return objectLockRecord{}, false, fmt.Errorf("parquet sink: %s: %w", t.loc.ObjectURL(t.lock()), err)
	}
	return rec, true, nil
}

// renew extends the lease every third of it while the object is still
// this holder's; once it is not (taken over after a freeze), Lost closes.
func (l *objectLock) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.lease/3)
		err := l.check(ctx)
		if err == nil {
			rec := l.rec
			rec.Expires = time.Now().Add(l.lease)
			body, _ := json.Marshal(rec)
			err = l.t.b.Write(ctx, l.t.lock(), bytes.NewReader(body), objstore.WriteOptions{ContentType: "application/json"})
		}
		cancel()
		if err != nil {
			l.lostO.Do(func() { close(l.lost) })
			return
		}
	}
}

// check fails when the lock object is no longer this holder's.
func (l *objectLock) check(ctx context.Context) error {
	cur, ok, err := readLock(ctx, l.t)
	if err != nil {
		return err
	}
	if !ok || cur.Token != l.rec.Token {
		l.lostO.Do(func() { close(l.lost) })
		return fmt.Errorf("parquet sink: the lock on %s was taken over; this writer is fenced", l.t.url())
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

// Lost is closed when the lock was taken over.
func (l *objectLock) Lost() <-chan struct{} { return l.lost }

// Release stops renewing and deletes the lock object if it is still this
// holder's. Idempotent.
func (l *objectLock) Release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		l.sink.mu.Lock()
		if l.sink.locks[l.t.url()] == l {
			delete(l.sink.locks, l.t.url())
		}
		l.sink.mu.Unlock()
		cur, ok, rerr := readLock(ctx, l.t)
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
