package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/sinks"
)

// DefaultLockTTL is the lease of the namespace lock: a holder renews it
// every third of it, and a crashed holder's lock lapses after it.
const DefaultLockTTL = 30 * time.Second

// lockValue is what {ns}:lock holds: the holder, for the error a second
// writer gets, and a random token that only the holder knows.
type lockValue struct {
	Holder sinks.Holder `json:"holder"`
	Token  string       `json:"token"`
}

// extendScript renews the lease only while the key still holds our value.
var extendScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// releaseScript deletes the lock only while it holds our value.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// Lock makes this process the only writer of the namespace: SET {ns}:lock
// NX PX ttl with the holder and a random token, renewed every ttl/3 by a
// compare-and-extend script. Another holder's lock is a *sinks.LockedError
// naming it.
func (s *Sink) Lock(ctx context.Context, run sinks.RunInfo, holder sinks.Holder) (sinks.Lock, error) {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	raw, err := json.Marshal(lockValue{Holder: holder, Token: hex.EncodeToString(tok[:])})
	if err != nil {
		return nil, fmt.Errorf("redis sink: lock: %w", err)
	}
	key, ttl := s.layout.Lock(), s.lockTTL
	for range 3 { // the other holder's lock may lapse between SET and GET
		start := time.Now()
		ok, err := s.client.SetNX(ctx, key, raw, ttl).Result()
		if err != nil {
			return nil, s.cfg.sanitize("lock: SET NX "+key, err)
		}
		if ok {
			l := &redisLock{s: s, key: key, value: string(raw), ttl: ttl, lost: make(chan struct{}),
				stop: make(chan struct{}), done: make(chan struct{})}
			go l.renew(start.Add(ttl))
			s.activeMu.Lock()
			s.locks[l] = true
			s.activeMu.Unlock()
			s.log.Info("redis namespace locked", "key", key, "run", run.RunID)
			return l, nil
		}
		other, err := s.client.Get(ctx, key).Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, s.cfg.sanitize("lock: GET "+key, err)
		}
		var v lockValue
		if err := json.Unmarshal([]byte(other), &v); err != nil {
			return nil, fmt.Errorf("redis sink: lock %s on %s is held by something that is not precog (%q): %w", key, s.cfg.where(), other, err)
		}
		return nil, &sinks.LockedError{Sink: "redis", Target: key + " on " + s.cfg.where(), Holder: v.Holder}
	}
	return nil, fmt.Errorf("redis sink: lock %s on %s: changing hands too fast to take", key, s.cfg.where())
}

// redisLock is a held namespace lock and its renewer.
type redisLock struct {
	s     *Sink
	key   string
	value string
	ttl   time.Duration

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	// frozen stops renewals (tests: a holder that hangs).
	frozen atomic.Bool

	relMu    sync.Mutex
	released bool
}

func (l *redisLock) Lost() <-chan struct{} { return l.lost }

func (l *redisLock) markLost(why string) {
	l.lostOnce.Do(func() {
		l.s.log.Error("redis namespace lock lost: stop writing", "key", l.key, "why", why)
		close(l.lost)
	})
}

// renew extends the lease every ttl/3 until Release. The lease is known to
// last until the send time of the last successful renewal plus ttl; if no
// renewal succeeds before that, or one finds the token gone or replaced,
// the lock is lost.
func (l *redisLock) renew(deadline time.Time) {
	defer close(l.done)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	expire := time.NewTimer(time.Until(deadline))
	defer expire.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-expire.C:
			l.markLost(fmt.Sprintf("lease of %s not renewed in time", l.ttl))
			return
		case <-tick.C:
		}
		if l.frozen.Load() {
			continue
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		n, err := extendScript.Run(ctx, l.s.client, []string{l.key}, l.value, l.ttl.Milliseconds()).Int()
		cancel()
		switch {
		case err != nil:
			l.s.log.Warn("redis lock renewal failed; retrying", "key", l.key, "err", redact(err.Error(), l.s.cfg.password))
		case n == 0:
			l.markLost("the lock was taken over or deleted")
			return
		default:
			deadline = start.Add(l.ttl)
			expire.Reset(time.Until(deadline))
		}
	}
}

// Release stops renewing and deletes the lock if it is still ours (never
// another holder's). Idempotent; a failed release may be retried.
func (l *redisLock) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return nil
	}
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	if err := releaseScript.Run(ctx, l.s.client, []string{l.key}, l.value).Err(); err != nil {
		return l.s.cfg.sanitize("release lock "+l.key, err)
	}
	l.released = true
	l.s.activeMu.Lock()
	delete(l.s.locks, l)
	l.s.activeMu.Unlock()
	return nil
}

// releaseLocks releases the locks a caller forgot (Close).
func (s *Sink) releaseLocks() {
	s.activeMu.Lock()
	held := make([]*redisLock, 0, len(s.locks))
	for l := range s.locks {
		held = append(held, l)
	}
	s.activeMu.Unlock()
	for _, l := range held {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := l.Release(ctx); err != nil {
			s.log.Warn("redis lock not released at close; it lapses after its TTL", "key", l.key, "err", err)
		}
		cancel()
	}
}
