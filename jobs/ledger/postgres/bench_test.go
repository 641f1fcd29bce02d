package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// BenchmarkClaimCycle measures ledger capacity: 32 workers each loop
// ClaimNext + Heartbeat + Complete over 4 runs of one pool; it reports
// cycles (shards) per second.
func BenchmarkClaimCycle(b *testing.B) {
	const workers, runs = 32, 4
	ctx := context.Background()
	l, err := Open(ctx, testservers.Postgres(b).DSN, Options{MaxConns: workers + 4})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	per := b.N/runs + 1
	for i := range runs {
		shards := make([]jobs.Shard, per)
		for j := range shards {
			shards[j] = jobs.Shard{Index: j, Plan: []byte(`{"row_group":1}`)}
		}
		if err := l.CreateRun(ctx, jobs.Run{ID: fmt.Sprintf("bench-%d", i), Job: fmt.Sprintf("j%d", i), Pool: "p"}, shards); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("w%d", w)
			for done.Load() < int64(b.N) {
				r, s, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "p", Worker: name, Lease: time.Minute})
				if errors.Is(err, ledger.ErrNoShard) {
					return
				}
				if err == nil {
					err = l.Heartbeat(ctx, ledger.HeartbeatParams{RunID: r.ID, Shard: s.Index, Worker: name, Lease: time.Minute})
				}
				if err == nil {
					err = l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: name, Counts: jobs.Counts{RowsIn: 1, RowsOut: 1}})
				}
				if errors.Is(err, ledger.ErrLeaseLost) {
					// Near the end, nothing pending: a speculative second
					// lease of a running shard lost to the first commit.
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(done.Load())/time.Since(start).Seconds(), "cycles/s")
}
