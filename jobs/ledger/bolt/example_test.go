package bolt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// A run's life in the embedded ledger: created with its planned shards,
// each shard claimed under a lease and completed with its counts, fenced
// so that a worker whose lease was taken over can change nothing.
func Example() {
	dir, _ := os.MkdirTemp("", "ledger-example")
	defer os.RemoveAll(dir)
	led, err := bolt.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer led.Close()
	ctx := context.Background()

	run := jobs.Run{ID: "scores-1", Job: "scores", Version: "v1", ParamsKey: "date=2026-11-01", State: jobs.RunPending, Shards: 2}
	shards := []jobs.Shard{
		{RunID: run.ID, Index: 0, Plan: json.RawMessage(`{"rows":[0,100]}`), EstRows: 100, State: jobs.ShardPending},
		{RunID: run.ID, Index: 1, Plan: json.RawMessage(`{"rows":[100,200]}`), EstRows: 100, State: jobs.ShardPending},
	}
	if err := led.CreateRun(ctx, run, shards); err != nil {
		fmt.Println(err)
		return
	}
	for _, worker := range []string{"w1", "w2"} {
		sh, err := led.Claim(ctx, run.ID, worker, time.Minute)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s claimed shard %d (attempt %d)\n", worker, sh.Index, sh.Attempts)
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: run.ID, Shard: sh.Index, Worker: worker, Counts: jobs.Counts{RowsIn: 100, RowsOut: 100}}); err != nil {
			fmt.Println(err)
			return
		}
	}
	// A late Complete from a worker that holds no lease is refused.
	err = led.Complete(ctx, ledger.CompleteParams{RunID: run.ID, Shard: 0, Worker: "w3", Counts: jobs.Counts{RowsIn: 100}})
	fmt.Println("late complete refused:", errors.Is(err, ledger.ErrLeaseLost))
	_, err = led.Claim(ctx, run.ID, "w1", time.Minute)
	fmt.Println("nothing left to claim:", errors.Is(err, ledger.ErrNoShard))
	r, _ := led.Run(ctx, run.ID)
	fmt.Println("rows out:", r.Counts.RowsOut)
	// Output:
	// w1 claimed shard 0 (attempt 1)
	// w2 claimed shard 1 (attempt 1)
	// late complete refused: true
	// nothing left to claim: true
	// rows out: 200
}
