package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup"
	"github.com/precog-ml/precog/lookup/client"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// counting wraps the real server to count requests and the most in flight
// at once; hold delays each request so that parallel ones overlap.
type counting struct {
	h               http.Handler
	hold            time.Duration
	total, inFlight atomic.Int32
	mu              sync.Mutex
	maxInFlight     int32
	at              []time.Time
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.inFlight.Add(1)
	c.total.Add(1)
	c.mu.Lock()
	c.maxInFlight = max(c.maxInFlight, n)
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	time.Sleep(c.hold)
	c.h.ServeHTTP(w, r)
	c.inFlight.Add(-1)
}

// serve runs a lookup API over rd (a Redis-only namespace "recs" + prefix)
// behind a counting handler.
func serve(t *testing.T, rd *testservers.RedisServer, mutate func(*lookup.Config)) (string, string, *counting) {
	t.Helper()
	ns := "recs" + rd.Prefix
	spec := &jobs.Spec{Name: "recs", Source: jobs.SourceSpec{Key: "user_id"}, Serving: jobs.ServingSpec{Live: new(bool)},
		Sinks: jobs.SinksSpec{Redis: &jobs.RedisSinkSpec{Addr: rd.Addr, DB: rd.DB, Namespace: ns}}}
	cfg := lookup.Config{Specs: []*jobs.Spec{spec}, Tokens: []string{"tok"}, VersionPoll: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := lookup.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cnt := &counting{h: srv}
	hs := httptest.NewServer(cnt)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return hs.URL, ns, cnt
}

func publish(t *testing.T, rd *testservers.RedisServer, ns string, n int) {
	t.Helper()
	c := rd.Client(t)
	ctx := context.Background()
	for i := range n {
		rec := fmt.Sprintf(`{"items":[%d,%d],"model_version":"m1","computed_at":"2026-05-01T04:00:00Z"}`, i, i+1)
		if err := c.Set(ctx, sinkredis.Layout{Namespace: ns}.Record("run-1", fmt.Sprintf("user-%d", i)), rec, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Set(ctx, sinkredis.Layout{Namespace: ns}.Current(), "run-1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.Publish(ctx, sinkredis.Layout{Namespace: ns}.Channel(), "run-1")
}

type recs struct {
	Items []int64 `json:"items"`
}

// A key list over the server's limit is split, sent in parallel (bounded)
// and reassembled in order; values decode into a typed struct.
func TestBatchGetSplitsInParallel(t *testing.T) {
	t.Parallel()
	rd := testservers.Redis(t)
	url, ns, cnt := serve(t, rd, func(c *lookup.Config) { c.MaxKeysPerBatch = 10 })
	publish(t, rd, ns, 90)
	c := client.New(url, "tok", client.WithMaxBatchKeys(10), client.WithParallelism(3))
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Get(ctx, ns, "user-0"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("never published: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	keys := make([]string, 95) // user-90..94 are misses
	for i := range keys {
		keys[len(keys)-1-i] = fmt.Sprintf("user-%d", i) // reversed: order must survive the split
	}
	cnt.hold = 30 * time.Millisecond
	cnt.total.Store(0)
	res, err := client.BatchGetAs[recs](ctx, c, ns, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(keys) {
		t.Fatalf("%d results for %d keys", len(res), len(keys))
	}
	for i, r := range res {
		var want int64
		if _, err := fmt.Sscanf(keys[i], "user-%d", &want); err != nil {
			t.Fatal(err)
		}
		if r.Key != keys[i] {
			t.Fatalf("result %d is key %s, want %s", i, r.Key, keys[i])
		}
		if want >= 90 {
			if r.Found || r.Status != client.StatusMiss {
				t.Errorf("key %s: %+v, want a miss", keys[i], r)
			}
			continue
		}
		if !r.Found || r.Status != client.StatusFound || len(r.Value.Items) != 2 || r.Value.Items[0] != want {
			t.Errorf("key %s: %+v", keys[i], r)
		}
	}
	cnt.mu.Lock()
	maxIn := cnt.maxInFlight
	cnt.mu.Unlock()
	if got := cnt.total.Load(); got != 10 {
		t.Errorf("%d requests for 95 keys in parts of 10, want 10", got)
	}
	if maxIn < 2 || maxIn > 3 {
		t.Errorf("at most %d parts in flight, want 2-3 (parallelism 3)", maxIn)
	}

	// Typed single get.
	v, p, err := client.Get[recs](ctx, c, ns, "user-7")
	if err != nil || len(v.Items) != 2 || v.Items[1] != 8 || p.ModelVersion != "m1" {
		t.Fatalf("Get[recs]: %+v %+v %v", v, p, err)
	}
}

// With WithRetry, a 503 (Redis down, no other store) is retried with
// backoff, waiting at least the server's Retry-After, until Redis is back;
// without it the 503 is returned at once.
func TestRetriesUnavailable(t *testing.T) {
	t.Parallel()
	rd := testservers.NewRedis(t)
	url, ns, cnt := serve(t, rd, nil)
	publish(t, rd, ns, 1)
	ctx := context.Background()
	plain := client.New(url, "tok")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := plain.Get(ctx, ns, "user-0"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("never published: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rd.Stop()
	var apiErr *client.Error
	if _, err := plain.Get(ctx, ns, "user-0"); !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.RetryAfter != time.Second {
		t.Fatalf("without retries: %v (%+v)", err, apiErr)
	}

	cnt.mu.Lock()
	cnt.at = nil
	cnt.mu.Unlock()
	go func() {
		time.Sleep(1500 * time.Millisecond)
		rd.Start()
		publish(t, rd, ns, 1)
	}()
	c := client.New(url, "tok", client.WithRetry(client.RetryPolicy{Attempts: 20, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}))
	res, err := c.BatchGet(ctx, ns, []string{"user-0"})
	if err != nil || !res[0].Found {
		t.Fatalf("with retries: %v %+v", err, res)
	}
	cnt.mu.Lock()
	defer cnt.mu.Unlock()
	if len(cnt.at) < 2 {
		t.Fatalf("%d attempts, want a retry", len(cnt.at))
	}
	for i := 1; i < len(cnt.at); i++ {
		if gap := cnt.at[i].Sub(cnt.at[i-1]); gap < 900*time.Millisecond {
			t.Errorf("retry %d after %v: Retry-After: 1 not honoured (backoff alone is ≤ 50ms)", i, gap)
		}
	}
}
