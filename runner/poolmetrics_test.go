package runner

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/precog-ml/precog/jobs"
)

// TestPoolMetrics: a worker's /metrics carries its pool's load from the
// ledger (only its pool's), and says when the ledger does not answer.
func TestPoolMetrics(t *testing.T) {
	ctx := context.Background()
	led := clusterLedger(t)
	for i, pool := range []string{"gpu", "gpu", "default"} {
		shards := make([]jobs.Shard, 3+i)
		for j := range shards {
			shards[j] = jobs.Shard{Index: j}
		}
		run := jobs.Run{ID: "r" + string(rune('a'+i)), Job: "j" + string(rune('a'+i)), Pool: pool}
		if err := led.CreateRun(ctx, run, shards); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := led.Claim(ctx, "ra", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	w := NewWorker(led, WorkerOptions{Pool: "gpu", Logger: slog.New(slog.DiscardHandler)})
	pc := w.Metrics()[len(w.Metrics())-1]
	want := `
# HELP precog_pool_ledger_up 1 when the last scrape read the pool's load from the ledger and the worker can claim from it (its role has the privileges claims need, its last claim did not fail); 0 otherwise: /readyz says why.
# TYPE precog_pool_ledger_up gauge
precog_pool_ledger_up{pool="gpu"} 1
# HELP precog_pool_runs_publishing Runs of the pool in their publish step, read from the ledger at scrape.
# TYPE precog_pool_runs_publishing gauge
precog_pool_runs_publishing{pool="gpu"} 0
`
	if err := testutil.CollectAndCompare(pc, strings.NewReader(want), "precog_pool_ledger_up", "precog_pool_runs_publishing"); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, state := range []string{"pending", "running"} {
		n, err := gaugeValue(pc, "precog_pool_shards", state)
		if err != nil {
			t.Fatal(err)
		}
		got[state] = n
	}
	if got["pending"] != 6 || got["running"] != 1 {
		t.Fatalf("precog_pool_shards{pool=gpu} = %v, want pending 6 (3+4-1), running 1", got)
	}
	led.Close()
	down := `
# HELP precog_pool_ledger_up 1 when the last scrape read the pool's load from the ledger and the worker can claim from it (its role has the privileges claims need, its last claim did not fail); 0 otherwise: /readyz says why.
# TYPE precog_pool_ledger_up gauge
precog_pool_ledger_up{pool="gpu"} 0
`
	if err := testutil.CollectAndCompare(pc, strings.NewReader(down)); err != nil {
		t.Fatalf("with the ledger closed: %v", err)
	}
}

// gaugeValue collects c and returns the value of metric name whose state
// label is state.
func gaugeValue(c prometheus.Collector, name, state string) (float64, error) {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var found *float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			return 0, err
		}
		if !strings.Contains(m.Desc().String(), `"`+name+`"`) {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == state {
				v := d.GetGauge().GetValue()
				found = &v
			}
		}
	}
	if found == nil {
		return 0, fmt.Errorf("no %s{state=%q}", name, state)
	}
	return *found, nil
}
