package lookup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSlowFirstQueryDoesNotOpenTheBreaker: right after start, the first
// query of the Postgres view (its key column's type) is slow: another
// connection holds a lock on the view, as a migration or a loaded machine
// would. Requests that arrive meanwhile wait for that cold-start query
// within their own deadline instead of failing at the step timeout, so the
// breaker stays closed and, once the lock goes, every one answers 200 from
// Postgres. On main each timed out at the step timeout, the third opened
// the breaker, and the server answered 503 until a probe closed it.
func TestSlowFirstQueryDoesNotOpenTheBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{mutate: func(c *Config) {
		c.StoreTimeout = 2 * time.Second // generous, as the suite's: the rows query after the lock goes
		c.RequestTimeout = time.Minute
	}})
	tbl := e.srv.ns[e.ns].pg
	// The warm-up at New raced newEnv's CREATE VIEW (it failed before it,
	// or read the key type after it, as the machine's speed has it): wait
	// it out and start from a key type not known yet, as right after a
	// start.
	waitUntil(t, "the warm-up query to end", func() bool {
		tbl.mu.Lock()
		defer tbl.mu.Unlock()
		if tbl.load != nil {
			return false
		}
		tbl.resolve = false
		return true
	})
	e.pg.Exec(t, `INSERT INTO user_scores_run1 VALUES ('user-2', 0.5, 'v-model', '2026-01-02T00:00:00Z')`)

	ctx := context.Background()
	locker, err := pgx.Connect(ctx, e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `LOCK TABLE user_scores IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	const requests = 4 // more than breakerThreshold
	type result struct {
		code int
		body map[string]any
	}
	results := make(chan result, requests)
	var wg sync.WaitGroup
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := e.get("user-2")
			results <- result{code, body}
		}()
	}
	// Every request is waiting on the cold-start query, which waits on
	// the lock: only now may the lock go.
	waitUntil(t, "every request waiting on the key type's query", func() bool {
		tbl.mu.Lock()
		defer tbl.mu.Unlock()
		return tbl.waiting == requests
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.code != 200 || r.body["source"] != "postgres" {
			t.Errorf("GET while the first query was slow: %d %v, want 200 from postgres", r.code, r.body)
		}
	}
	if tbl.brk.open.Load() || tbl.brk.failures.Load() != 0 {
		t.Fatalf("breaker after a slow first query: open=%v failures=%d, want closed with no failure", tbl.brk.open.Load(), tbl.brk.failures.Load())
	}
}
