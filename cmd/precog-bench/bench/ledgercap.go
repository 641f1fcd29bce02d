package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// capacityRuns is how many runs the ledger-capacity loop spreads its shards
// over (as BenchmarkClaimCycle in jobs/ledger/postgres does).
const capacityRuns = 4

// cycleStats is what one ledger-capacity loop measured: completed cycles
// per second, their number, and each call's mean latency under the load.
type cycleStats struct {
	rate                       float64
	n                          int64
	claim, heartbeat, complete time.Duration
}

// claimCycles measures ledger capacity: workers goroutines each loop
// ClaimNext + Heartbeat + Complete on led for d, over capacityRuns runs of
// a pool of its own (shardsPerRun shards each), and returns the completed
// cycles (shards) per second. Running out of shards ends the loop early.
func claimCycles(ctx context.Context, led ledger.Cluster, pool string, workers, shardsPerRun int, d time.Duration) (cycleStats, error) {
	for i := range capacityRuns {
		shards := make([]jobs.Shard, shardsPerRun)
		for j := range shards {
			shards[j] = jobs.Shard{Index: j, Plan: []byte(`{"row_group":1}`)}
		}
		run := jobs.Run{ID: fmt.Sprintf("%s-%d", pool, i), Job: fmt.Sprintf("%s-j%d", pool, i), Version: "v", Pool: pool}
		if err := led.CreateRun(ctx, run, shards); err != nil {
			return cycleStats{}, fmt.Errorf("capacity: create run %s: %w", run.ID, err)
		}
	}
	var done, tClaim, tBeat, tComplete atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-w%d", pool, w)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				r, s, err := led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: pool, Worker: name, Lease: time.Minute})
				if errors.Is(err, ledger.ErrNoShard) {
					return
				}
				t1 := time.Now()
				if err == nil {
					err = led.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: name, Lease: time.Minute})
				}
				t2 := time.Now()
				if err == nil {
					err = led.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: name, Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}})
				}
				tClaim.Add(int64(t1.Sub(t0)))
				tBeat.Add(int64(t2.Sub(t1)))
				tComplete.Add(int64(time.Since(t2)))
				if errors.Is(err, ledger.ErrLeaseLost) {
					// Once nothing is pending, ClaimNext leases running
					// shards a second time (speculation) and the first
					// to complete wins: the other's attempt is lost, as
					// a worker's would be, and not counted.
					continue
				}
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, fmt.Errorf("capacity: worker %s: %w", name, err))
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return cycleStats{}, firstErr
	}
	n := done.Load()
	st := cycleStats{rate: float64(n) / elapsed.Seconds(), n: n}
	if n > 0 {
		// Calls of lost (speculative) cycles count in the sums: the
		// means are per completed cycle, slightly pessimistic.
		st.claim = time.Duration(tClaim.Load() / n)
		st.heartbeat = time.Duration(tBeat.Load() / n)
		st.complete = time.Duration(tComplete.Load() / n)
	}
	return st, nil
}

// rawStatements measures the raw limit of the ledger loop: workers
// goroutines each running one single-statement round trip (sql, given the
// goroutine's index as $1 when it takes a parameter) in a loop for d on
// their own pool of connections; it returns statements per second.
func rawStatements(ctx context.Context, dsn, sql string, workers int, d time.Duration) (float64, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return 0, errors.New("raw statements: the benchmark's Postgres DSN does not parse")
	}
	cfg.MaxConns = int32(workers + 4)
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("raw statements: connect: %w", err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_raw (id integer PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		return 0, fmt.Errorf("raw statements: create table bench_raw: %w", err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO bench_raw SELECT g, 0 FROM generate_series(0, $1::int - 1) g ON CONFLICT DO NOTHING`, workers); err != nil {
		return 0, fmt.Errorf("raw statements: fill table bench_raw: %w", err)
	}
	if err := warmPool(ctx, db, workers); err != nil {
		return 0, err
	}
	withArg := sqlTakesArg(sql)
	var n atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				var err error
				if withArg {
					_, err = db.Exec(ctx, sql, w)
				} else {
					_, err = db.Exec(ctx, sql)
				}
				if err != nil {
					errs[w] = fmt.Errorf("raw statements: %q: %w", sql, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// warmPool opens n connections of db before a timed loop, so that the loop
// does not pay for connecting.
func warmPool(ctx context.Context, db *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := db.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("raw statements: connect: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

func sqlTakesArg(sql string) bool {
	for i := 0; i+1 < len(sql); i++ {
		if sql[i] == '$' && sql[i+1] == '1' {
			return true
		}
	}
	return false
}

// notifyLatency is the raw limit of pick-up: n NOTIFYs on channel from one
// connection, each timed from just before the statement until a second
// connection, blocked in LISTEN, receives it.
func notifyLatency(ctx context.Context, dsn string, n int) ([]time.Duration, error) {
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("notify latency: connect listener: %w", err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	sender, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("notify latency: connect sender: %w", err)
	}
	defer sender.Close(context.WithoutCancel(ctx))
	const channel = "precog_bench_raw"
	if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
		return nil, fmt.Errorf("notify latency: listen: %w", err)
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		time.Sleep(10 * time.Millisecond) // the listener is idle, as a waiting worker is
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := listener.WaitForNotification(wctx)
			got <- err
		}()
		t0 := time.Now()
		if _, err := sender.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, fmt.Sprint(i)); err != nil {
			<-got
			return nil, fmt.Errorf("notify latency: notify: %w", err)
		}
		if err := <-got; err != nil {
			return nil, fmt.Errorf("notify latency: notice %d not received: %w", i, err)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// quantile is the q-quantile (nearest rank) of ds; ds is sorted in place.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	k := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(k, 0), len(ds)-1)]
}
