package runner

import (
	"context"
	"log/slog"
	"sync"
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
		"1 when the last scrape read the pool's load from the ledger and the worker can claim from it (its role has the privileges claims need, its last claim did not fail); 0 otherwise: /readyz says why.",
		[]string{"pool"}, nil)
)

// poolCollector reports its pool's outstanding work at each scrape (one
// indexed query with a timeout), so a worker's /metrics shows the queue
// it serves next to its own throughput, without a polling loop.
type poolCollector struct {
	led  poolLoader
	pool string
	// ready is the worker's readiness (Worker.Ready): up is 0 when it fails.
	ready   func(ctx context.Context) error
	timeout time.Duration
	log     *slog.Logger

	mu sync.Mutex
	// logged is the last failure logged: a failure is logged when it
	// changes, not at every scrape.
	logged string
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
		c.note("pool metrics: ledger did not answer", err)
		ch <- prometheus.MustNewConstMetric(poolUpDesc, prometheus.GaugeValue, 0, c.pool)
		return
	}
	up := 1.0
	if c.ready != nil {
		if err := c.ready(ctx); err != nil {
			c.note("pool metrics: the worker cannot claim from the ledger", err)
			up = 0
		}
	}
	if up == 1 {
		c.note("", nil)
	}
	ch <- prometheus.MustNewConstMetric(poolUpDesc, prometheus.GaugeValue, up, c.pool)
	ch <- prometheus.MustNewConstMetric(poolShardsDesc, prometheus.GaugeValue, float64(pl.Pending), c.pool, "pending")
	ch <- prometheus.MustNewConstMetric(poolShardsDesc, prometheus.GaugeValue, float64(pl.Running), c.pool, "running")
	ch <- prometheus.MustNewConstMetric(poolPublishingDesc, prometheus.GaugeValue, float64(pl.Publishing), c.pool)
}

// note logs a scrape's failure (msg, err) when it differs from the last
// one logged, and a recovery; err nil: the scrape succeeded.
func (c *poolCollector) note(msg string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && c.logged != "":
		c.logged = ""
		c.log.Info("pool metrics: the ledger answers and the worker can claim again", "pool", c.pool)
	case err != nil && c.logged != msg+err.Error():
		c.logged = msg + err.Error()
		c.log.Warn(msg, "pool", c.pool, "err", err)
	}
}

// Metrics are the worker's collectors: the batch runner's (Metrics) and
// its pool's load from the ledger.
func (w *Worker) Metrics() []prometheus.Collector {
	return append(Metrics(), &poolCollector{led: w.led, pool: w.opts.Pool, ready: w.Ready, timeout: 2 * time.Second, log: w.log})
}
