package ledgertest

import (
	"context"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// testCompleteCost: a shard's cost is stored with its commit and read back
// with the shard; the run's cost is its committed shards' summed; Reopen
// takes a shard's cost off with its counts; a shard committed without a
// cost (as by a version that recorded none) reads as zero.
func testCompleteCost(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r := create(t, l, "costs", "", 3)
	costs := []jobs.Cost{
		{CPUSeconds: 1.5, DeviceSeconds: 2.25, GPUSampledSeconds: 2, GPUBusySeconds: 1.5, GPURows: 1000},
		{CPUSeconds: 0.75},
		{},
	}
	for range costs {
		s := claim(t, l, r.ID, "w1", longLease)
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w1",
			Counts: jobs.Counts{RowsIn: 10, RowsOut: 10}, Cost: costs[s.Index]}); err != nil {
			t.Fatalf("Complete(%d): %v", s.Index, err)
		}
	}
	shards, err := l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range shards {
		if s.Cost != costs[i] {
			t.Errorf("shard %d cost %+v, want %+v", i, s.Cost, costs[i])
		}
	}
	want := costs[0].Add(costs[1])
	if got := jobs.SumCost(shards); got != want {
		t.Errorf("run cost %+v, want %+v", got, want)
	}
	if err := l.Reopen(ctx, r.ID, []int{0}, "lost in a sink"); err != nil {
		t.Fatal(err)
	}
	if s := mustShard(t, l, r.ID, 0); !s.Cost.IsZero() {
		t.Errorf("reopened shard keeps cost %+v", s.Cost)
	}
	shards, err = l.Shards(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := jobs.SumCost(shards); got != costs[1] {
		t.Errorf("run cost after reopen %+v, want %+v", got, costs[1])
	}
}
