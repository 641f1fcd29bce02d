package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/sinks"
)

// DefaultLockTTL is the lease of the namespace lock when the holder names
// none (sinks.Holder.Lease): a holder renews it every third of it, and a
// crashed holder's lock lapses after it.
const DefaultLockTTL = sinks.DefaultLockLease

// lockValue is what {ns}:lock holds: the holder, for the error a second
// writer gets, and a random token that only the holder knows.
type lockValue struct {
	Holder sinks.Holder `json:"holder"`
	Token  string       `json:"token"`
}

// extendScript renews the lease while the key still holds our value, and
// takes it again when it is gone (a Redis restart without persistence, an
// eviction): nobody else holds it then, so we are still the only writer.
// It returns 0 only when another holder has the key.
var extendScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0`)

// takeoverScript replaces a lock left by an earlier process of the same
// run (killed before it could release it) if it is still that value.
var takeoverScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
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
	if holder.Lease > 0 {
		ttl = holder.Lease
	}
	for range 3 { // the other holder's lock may lapse between SET and GET
		start := time.Now()
		ok, err := s.client.SetNX(ctx, key, raw, ttl).Result()
		if err != nil {
			return nil, s.cfg.sanitize("lock: SET NX "+key, err)
		}
		if ok {
			return s.held(key, string(raw), ttl, start, run), nil
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
		if v.Holder.RunID != run.RunID {
			return nil, &sinks.LockedError{Sink: "redis", Target: key + " on " + s.cfg.where(), Holder: v.Holder}
		}
		// An earlier process of this same run holds it: it died without
		// releasing (a run is resumed by one process at a time), so take
		// the lock over instead of waiting for its lease to lapse.
		n, err := takeoverScript.Run(ctx, s.client, []string{key}, other, raw, ttl.Milliseconds()).Int()
		if err != nil {
			return nil, s.cfg.sanitize("lock: take over "+key, err)
		}
		if n == 1 {
			s.log.Info("took over the lock of an earlier process of the run", "key", key, "run", run.RunID, "pid", v.Holder.PID)
			return s.held(key, string(raw), ttl, start, run), nil
		}
	}
	return nil, fmt.Errorf("redis sink: lock %s on %s: changing hands too fast to take", key, s.cfg.where())
}

// held starts renewing a lock just taken at start.
func (s *Sink) held(key, value string, ttl time.Duration, start time.Time, run sinks.RunInfo) *redisLock {
	l := &redisLock{s: s, key: key, value: value, ttl: ttl}
	l.Lease = sinks.StartLease(start, sinks.LeaseParams{TTL: ttl, Renew: l.renew,
		OnLost: func(why string) { s.log.Error("redis namespace lock lost: stop writing", "key", key, "why", why) },
		OnRetry: func(err error) {
			s.log.Warn("redis lock renewal failed; retrying", "key", key, "err", redact(err.Error(), s.cfg.password))
		}})
	s.activeMu.Lock()
	s.locks[l] = true
	s.activeMu.Unlock()
	s.log.Info("redis namespace locked", "key", key, "run", run.RunID)
	return l
}

// redisLock is a held namespace lock and its lease (Lost, renewed every
// ttl/3).
type redisLock struct {
	*sinks.Lease
	s     *Sink
	key   string
	value string
	ttl   time.Duration

	relMu    sync.Mutex
	released bool
}

// renew extends the lock's TTL once if the token is still ours
// (sinks.LeaseParams.Renew); taken over or deleted is sinks.ErrLeaseGone.
// A lock the server lost (a restart, an eviction) is taken again.
func (l *redisLock) renew(ctx context.Context) error {
	n, err := extendScript.Run(ctx, l.s.client, []string{l.key}, l.value, l.ttl.Milliseconds()).Int()
	switch {
	case err != nil:
		return err
	case n == 0:
		return fmt.Errorf("%w: the lock was taken over or deleted", sinks.ErrLeaseGone)
	case n == 2:
		l.s.log.Warn("redis lock was gone (server restarted or evicted it); took it again", "key", l.key)
	}
	return nil
}

// Release stops renewing and deletes the lock if it is still ours (never
// another holder's). Idempotent; a failed release may be retried.
func (l *redisLock) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return nil
	}
	l.Stop()
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
