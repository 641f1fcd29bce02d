package runner

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/precog-ml/precog/jobs/ledger"
)

// poolLoader is the part of the cluster ledger the pool metrics read.
type poolLoader interface {
	PoolLoad(ctx context.Context, pool string) (ledger.PoolLoad, error)
}

var (
	poolShardsDesc = prometheus.NewDesc("precog_pool_shards",
		"Shards of the pool's open runs by state, read from the ledger at scrape: pending (waiting for a worker) and running (leased). Pending staying above zero while workers are idle means they cannot take the pool's runs (see precog status).",
		[]string{"pool", "state"}, nil)
	poolPublishingDesc = prometheus.NewDesc("precog_pool_runs_publishing",
		"Runs of the pool in their publish step, read from the ledger at scrape.",
		[]string{"pool"}, nil)
	poolUpDesc = prometheus.NewDesc("precog_pool_ledger_up",
		"1 when the last scrape read the pool's load from the ledger, 0 when the ledger did not answer in time.",
		[]string{"pool"}, nil)
)

// poolCollector reports its pool's outstanding work at each scrape (one
// indexed query with a timeout), so a worker's /metrics shows the queue
// it serves next to its own throughput, without a polling loop.
type poolCollector struct {
	led     poolLoader
	pool    string
	timeout time.Duration
	log     *slog.Logger
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolShardsDesc
	ch <- poolPublishingDesc
	ch <- poolUpDesc
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	pl, err := c.led.PoolLoad(ctx, c.pool)
	if err != nil {
		c.log.Warn("pool metrics: ledger did not answer", "pool", c.pool, "err", err)
		ch <- prometheus.MustNewConstMetric(poolUpDesc, prometheus.GaugeValue, 0, c.pool)
		return
	}
	ch <- prometheus.MustNewConstMetric(poolUpDesc, prometheus.GaugeValue, 1, c.pool)
	ch <- prometheus.MustNewConstMetric(poolShardsDesc, prometheus.GaugeValue, float64(pl.Pending), c.pool, "pending")
	ch <- prometheus.MustNewConstMetric(poolShardsDesc, prometheus.GaugeValue, float64(pl.Running), c.pool, "running")
	ch <- prometheus.MustNewConstMetric(poolPublishingDesc, prometheus.GaugeValue, float64(pl.Publishing), c.pool)
}

// Metrics are the worker's collectors: the batch runner's (Metrics) and
// its pool's load from the ledger.
func (w *Worker) Metrics() []prometheus.Collector {
	return append(Metrics(), &poolCollector{led: w.led, pool: w.opts.Pool, timeout: 2 * time.Second, log: w.log})
}
