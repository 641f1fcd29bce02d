package lookup

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus series, on a registry of its own so
// several servers (tests) can live in one process.
type metrics struct {
	reg *prometheus.Registry
	// latency by endpoint (get, batchGet, predict) and source (redis,
	// postgres, live, miss, mixed, error).
	latency *prometheus.HistogramVec
	// lookups per namespace and source (redis, postgres, live, miss): the
	// hit ratio of a source is its share of the total.
	lookups     *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	liveBatch   *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	shed        prometheus.Counter
	responses   *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "precog_lookup_request_duration_seconds",
			Help:    "API request latency by endpoint and answering source.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"endpoint", "source"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "precog_lookup_keys_total",
			Help: "Keys answered, by namespace and source (redis, postgres, live, miss).",
		}, []string{"namespace", "source"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "precog_lookup_store_errors_total",
			Help: "Failed or timed-out store steps that fell through to the next source.",
		}, []string{"namespace", "store"}),
		liveBatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "precog_lookup_live_batch_size",
			Help:    "Rows per live inference run (dynamic batching).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}, []string{"namespace"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "precog_lookup_in_flight_requests",
			Help: "API requests being served.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "precog_lookup_shed_total",
			Help: "Requests refused with 429 because the in-flight cap was reached.",
		}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "precog_lookup_responses_total",
			Help: "API responses by endpoint and HTTP status code.",
		}, []string{"endpoint", "code"}),
	}
	m.reg.MustRegister(m.latency, m.lookups, m.storeErrors, m.liveBatch, m.inFlight, m.shed, m.responses,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
