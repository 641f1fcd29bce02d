package runner

import (
	"fmt"
	"github.com/precog-ml/precog/jobs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StageStats accumulates the busy time of each pipeline stage across shards:
// the stage with the most busy time is what bounds a run (the others wait on
// it), which is the first question of any performance report.
type StageStats struct {
	mu     sync.Mutex
	stages map[string]*atomic.Int64
}

// Stage names; sinks add "write <sink>".
const (
	StageRead   = "read"
	StageEncode = "encode"
	StageInfer  = "infer"
)

func (s *StageStats) counter(stage string) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stages == nil {
		s.stages = map[string]*atomic.Int64{}
	}
	c, ok := s.stages[stage]
	if !ok {
		c = new(atomic.Int64)
		s.stages[stage] = c
	}
	return c
}

// add records d of busy time in stage (nil-safe).
func (s *StageStats) add(stage string, d time.Duration) {
	if s == nil {
		return
	}
	s.counter(stage).Add(int64(d))
	stageSeconds.WithLabelValues(stage).Add(d.Seconds())
}

// Snapshot returns the busy time per stage.
func (s *StageStats) Snapshot() map[string]time.Duration {
	out := map[string]time.Duration{}
	if s == nil {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.stages {
		out[k] = time.Duration(v.Load())
	}
	return out
}

// String lists stages busiest first: "infer 10.1s, write parquet 2.0s, …".
func (s *StageStats) String() string {
	snap := s.Snapshot()
	names := make([]string, 0, len(snap))
	for k := range snap {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return snap[names[i]] > snap[names[j]] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %s", n, snap[n].Round(time.Millisecond))
	}
	return strings.Join(parts, ", ")
}

// Prometheus metrics of batch runs, served by `precog run --metrics-addr`.
var (
	stageSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_stage_busy_seconds_total",
		Help: "Busy time of each pipeline stage (read, encode, infer, write <sink>); the busiest bounds the run.",
	}, []string{"stage"})
	rowsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_rows_total",
		Help: "Rows by outcome: read (from the source), written (to every sink), rejected (null or non-finite features).",
	}, []string{"outcome"})
	shardsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_shards_total",
		Help: "Shard attempts by result: committed, failed, released (interrupted).",
	}, []string{"result"})
	runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "precog_runs_finished_total", Help: "Runs this process finished, by job and final state (succeeded, failed, cancelled, held).",
	}, []string{"job_name", "state"})
	claimSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "precog_worker_claim_seconds", Help: "Latency of one claim call to the ledger (a worker's ClaimNext).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	shardSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "precog_shard_duration_seconds",
		Help:    "Wall time of committed shard attempts.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
	})
)

// Metrics are the batch runner's collectors, for a registry of the caller's.
func Metrics() []prometheus.Collector {
	return append([]prometheus.Collector{stageSeconds, rowsTotal, shardsTotal, shardSeconds, claimSeconds, runsFinished, modelLoads}, costMetrics()...)
}

// runFinished counts a run that reached a terminal state in this process.
func runFinished(job string, state jobs.RunState) {
	runsFinished.WithLabelValues(job, string(state)).Inc()
}
