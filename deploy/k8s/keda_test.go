package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
)

// poolQueries returns the KEDA query of each worker pool the overlay
// scales, keyed by the pool its target Deployment serves.
func poolQueries(t *testing.T, ov string) map[string]string {
	t.Helper()
	objs := render(t, ov)
	byDep := map[string]string{}
	for _, w := range workers(t, objs) {
		byDep[w.dep.Name] = w.pool
	}
	out := map[string]string{}
	for _, so := range ofKind[scaledObject](objs) {
		pool, ok := byDep[so.Spec.ScaleTargetRef.Name]
		if !ok {
			t.Fatalf("ScaledObject %s targets %s, not a worker Deployment", so.Name, so.Spec.ScaleTargetRef.Name)
		}
		out[pool] = so.Spec.Triggers[0].Metadata["query"]
	}
	return out
}

// The rendered KEDA query, run against a real ledger with runs pending in
// two pools, counts exactly its own pool's shards still to do (pending or
// running), keeps one for a run being published, and falls to 0 when the
// run is done.
func TestKEDAQueryCountsPoolShards(t *testing.T) {
	queries := poolQueries(t, "gpu")
	if len(queries) != 2 {
		t.Fatalf("gpu overlay scales pools %v, want default and gpu", queries)
	}
	pg := testservers.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	led, err := pgledger.Open(ctx, pg.DSN, pgledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	db := pg.Pool(t)
	count := func(pool string) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRow(ctx, queries[pool]).Scan(&n); err != nil {
			t.Fatalf("KEDA query of pool %s: %v\n%s", pool, err, queries[pool])
		}
		return n
	}
	expect := func(step string, want map[string]int64) {
		t.Helper()
		for pool, w := range want {
			if got := count(pool); got != w {
				t.Errorf("%s: pool %s counts %d, want %d", step, pool, got, w)
			}
		}
	}
	expect("empty ledger", map[string]int64{"default": 0, "gpu": 0})

	create := func(job, pool string, shards int) jobs.Run {
		run := jobs.Run{ID: job + "-1", Job: job, Version: "1", ParamsKey: "", Pool: pool, Shards: shards}
		sh := make([]jobs.Shard, shards)
		for i := range sh {
			sh[i] = jobs.Shard{Index: i, Plan: json.RawMessage(`{}`), EstRows: 100}
		}
		if err := led.CreateRun(ctx, run, sh); err != nil {
			t.Fatal(err)
		}
		return run
	}
	cpuRun := create("user-recs", "default", 3)
	gpuRun := create("item-embeddings", "gpu", 5)
	expect("two runs pending", map[string]int64{"default": 3, "gpu": 5})

	// Claimed shards still need their worker: running counts.
	var claimed []int
	for i := 0; i < 2; i++ {
		_, sh, err := led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "gpu", Worker: fmt.Sprintf("w%d", i), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, sh.Index)
	}
	expect("two gpu shards running", map[string]int64{"default": 3, "gpu": 5})
	for i, idx := range claimed {
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: gpuRun.ID, Shard: idx, Worker: fmt.Sprintf("w%d", i), Counts: jobs.Counts{RowsIn: 100, RowsOut: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	expect("two gpu shards committed", map[string]int64{"default": 3, "gpu": 3})
	for i := 0; i < 3; i++ {
		_, sh, err := led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "gpu", Worker: "w9", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := led.Complete(ctx, ledger.CompleteParams{RunID: gpuRun.ID, Shard: sh.Index, Worker: "w9", Counts: jobs.Counts{RowsIn: 100, RowsOut: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: gpuRun.ID, Worker: "w9", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	expect("gpu run publishing", map[string]int64{"default": 3, "gpu": 1})
	if err := led.FinishPublish(ctx, ledger.FinishPublishParams{RunID: gpuRun.ID, Worker: "w9", State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatal(err)
	}
	expect("gpu run succeeded", map[string]int64{"default": 3, "gpu": 0})
	if err := led.SetRunState(ctx, cpuRun.ID, jobs.RunCancelled, "test"); err != nil {
		t.Fatal(err)
	}
	expect("default run cancelled", map[string]int64{"default": 0, "gpu": 0})
}
