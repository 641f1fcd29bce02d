package lookup

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus series, on a registry of its own so
// several servers (tests) can live in one process.
type metrics struct {
	reg *prometheus.Registry
	// latency by endpoint (get, batchGet, predict) and source (redis,
	// postgres, live, miss, mixed, unavailable, error).
	latency *prometheus.HistogramVec
	// lookups per namespace and source (redis, postgres, live, miss,
	// unavailable): the hit ratio of a source is its share of the total.
	lookups     *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	corrupt     *prometheus.CounterVec
	circuitOpen *prometheus.GaugeVec
	versionLost *prometheus.GaugeVec
	liveBatch   *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	shed        prometheus.Counter
	responses   *prometheus.CounterVec

	// endpoints holds each endpoint's series resolved once, so that a
	// request observes them without hashing label values.
	endpoints map[string]*endpointMetrics
}

// Label values the hot path uses; resolved up front.
var (
	endpointNames  = []string{"get", "batchGet", "predict", "post", "namespace"}
	requestSources = []string{SourceRedis, SourcePostgres, SourceLive, "miss", "mixed", "unavailable", "error"}
	keySources     = []string{SourceRedis, SourcePostgres, SourceLive, "miss", "unavailable", sourceCorrupt}
	commonCodes    = []int{200, 400, 401, 404, 413, 429, 500, 503, 504}
)

// endpointMetrics are one endpoint's latency observers by source and
// response counters by status code.
type endpointMetrics struct {
	name    string
	m       *metrics
	latency map[string]prometheus.Observer
	codes   map[int]prometheus.Counter
}

func (e *endpointMetrics) observe(source string, code int, seconds float64) {
	if o, ok := e.latency[source]; ok {
		o.Observe(seconds)
	} else {
		e.m.latency.WithLabelValues(e.name, source).Observe(seconds)
	}
	if c, ok := e.codes[code]; ok {
		c.Inc()
	} else {
		e.m.responses.WithLabelValues(e.name, strconv.Itoa(code)).Inc()
	}
}

// keyCounters are one namespace's per-source key counters.
type keyCounters map[string]prometheus.Counter

func (m *metrics) keyCounters(ns string) keyCounters {
	k := keyCounters{}
	for _, s := range keySources {
		k[s] = m.lookups.WithLabelValues(ns, s)
	}
	return k
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
			Help: "Keys answered, by namespace and source (redis, postgres, live, miss, unavailable, corrupt).",
		}, []string{"namespace", "source"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "precog_lookup_store_errors_total",
			Help: "Failed or timed-out store steps that fell through to the next source.",
		}, []string{"namespace", "store"}),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "precog_lookup_corrupt_records_total",
			Help: "Stored records that could not be read (not a JSON object, a msgpack record that does not decode, a Postgres value with no JSON form): each is answered as an error of its key, never as a miss.",
		}, []string{"namespace", "store"}),
		circuitOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "precog_lookup_store_circuit_open",
			Help: "1 while a store's circuit breaker is open (requests skip it; a background probe retries), else 0.",
		}, []string{"store", "target"}),
		versionLost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "precog_lookup_redis_version_lost",
			Help: "1 while a namespace's published version has vanished from Redis (restart without data, flush): its Redis reads are unavailable until the next publish.",
		}, []string{"namespace"}),
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
		endpoints: map[string]*endpointMetrics{},
	}
	for _, ep := range endpointNames {
		e := &endpointMetrics{name: ep, m: m, latency: map[string]prometheus.Observer{}, codes: map[int]prometheus.Counter{}}
		for _, s := range requestSources {
			e.latency[s] = m.latency.WithLabelValues(ep, s)
		}
		for _, c := range commonCodes {
			e.codes[c] = m.responses.WithLabelValues(ep, strconv.Itoa(c))
		}
		m.endpoints[ep] = e
	}
	m.reg.MustRegister(m.latency, m.lookups, m.storeErrors, m.corrupt, m.circuitOpen, m.versionLost, m.liveBatch, m.inFlight, m.shed, m.responses,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
