package backfill

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

// ProbeBudget bounds the streaming part of the probe behind an estimate.
const ProbeBudget = 3 * time.Second

// MaxProbeRuns bounds the pipelines a parallel estimate probes at once.
const MaxProbeRuns = 8

// Ledger write transactions of a local run (runner/local.go): a claim and a
// complete per shard; create, open, three state changes and the release
// per run. Each is one bolt commit (data and meta synced), and the ledger
// serialises them, so parallelism does not divide them.
const (
	ledgerTxnsPerShard = 2
	ledgerTxnsPerRun   = 6
)

// ledgerSamples is how many synced writes sample the ledger's commit.
const ledgerSamples = 5

// EstimateParams is what Estimate estimates.
type EstimateParams struct {
	Spec *jobs.Spec
	// Plans are the shards the probe samples.
	Plans []sources.ShardPlan
	// Rows is every run's rows together; Runs is how many runs (values).
	Rows int64
	Runs int
	// Shards is every run's shards together.
	Shards int
	// Parallel is how many runs go at once.
	Parallel int
	// StateDir is where the ledger's transactions are sampled.
	StateDir string
}

// WallTime is an estimated wall time with its range at the probe's
// fastest and slowest third.
type WallTime struct{ Mid, Low, High time.Duration }

// WallEstimate is the wall time of a backfill (or one run) on this
// machine.
type WallEstimate struct {
	// Probes counts the probes made: 0 (the first failed), 1 or 2.
	Probes int
	// One is the probe of one run; Txn a ledger commit, Ledger all of
	// them.
	One         ProbeResult
	Txn, Ledger time.Duration
	// Serial is the estimate running one run at a time.
	Serial WallTime
	// Runs probed at once for Parallel > 1 (0: none), their probe and the
	// estimate at that parallelism.
	Runs     int
	Together ProbeResult
	Parallel WallTime
}

// Estimate probes p.Spec on a real sample of p.Plans' rows at the spec's
// batch size, writing through the spec's sinks into a throwaway version
// that is aborted (Probe), and estimates the wall time on this machine:
// each run's start-up and stage measured once, plus Rows at the probe's
// rate, plus the ledger's commits. For Parallel > 1 a second probe runs
// that many pipelines side by side (they share the cores, so the gain is
// rarely parallel×). When the second probe fails, the estimate of one run
// at a time is returned with its error.
func Estimate(ctx context.Context, p EstimateParams) (WallEstimate, error) {
	var e WallEstimate
	one, err := Probe(ctx, ProbeParams{Spec: p.Spec, Plans: p.Plans, Budget: ProbeBudget, Runs: 1, Sinks: true})
	if err != nil {
		return e, err
	}
	e.Probes, e.One = 1, one
	fixed := one.Open + one.Stage
	runs := max(p.Runs, 1)
	e.Txn = ledgerTxnCost(p.StateDir)
	e.Ledger = e.Txn * time.Duration(ledgerTxnsPerShard*p.Shards+ledgerTxnsPerRun*runs)
	est := func(r ProbeResult, parallel int) WallTime {
		waves := time.Duration((runs + parallel - 1) / parallel)
		at := func(rate float64) time.Duration {
			return waves*fixed + e.Ledger + time.Duration(float64(p.Rows)/rate*float64(time.Second))
		}
		return WallTime{Mid: at(r.Rate), Low: at(r.High), High: at(r.Low)}
	}
	e.Serial = est(one, 1)
	if p.Parallel <= 1 {
		return e, nil
	}
	n := min(p.Parallel, MaxProbeRuns)
	rn, err := Probe(ctx, ProbeParams{Spec: p.Spec, Plans: p.Plans, Budget: ProbeBudget, Runs: n, Sinks: true})
	if err != nil {
		return e, err
	}
	e.Probes, e.Runs, e.Together, e.Parallel = 2, n, rn, est(rn, n)
	return e, nil
}

// ledgerTxnCost samples a bolt commit in dir (or its nearest existing
// parent): the median of ledgerSamples writes of a page, each synced twice
// as bolt syncs its data and its meta page; 0 where none could be made.
func ledgerTxnCost(dir string) time.Duration {
	for dir != "" && dir != filepath.Dir(dir) {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			break
		}
		dir = filepath.Dir(dir)
	}
	f, err := os.CreateTemp(dir, ".precog-estimate-*")
	if err != nil {
		return 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := make([]byte, 4096)
	took := make([]time.Duration, 0, ledgerSamples)
	for i := range ledgerSamples {
		start := time.Now()
		if _, err := f.WriteAt(page, int64(i)*4096); err != nil || f.Sync() != nil || f.Sync() != nil {
			return 0
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2]
}
