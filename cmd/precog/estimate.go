package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/backfill"
	"github.com/precog-ml/precog/sources"
)

// probeBudget bounds the streaming part of the probe behind an estimate.
const probeBudget = 3 * time.Second

// maxProbeRuns bounds the pipelines a --parallel estimate probes at once.
const maxProbeRuns = 8

// estimateParams is what printEstimate estimates.
type estimateParams struct {
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

// Ledger write transactions of a local run (runner/local.go): a claim and a
// complete per shard; create, open, three state changes and the release
// per run. Each is one bolt commit (data and meta synced), and the ledger
// serialises them, so --parallel does not divide them.
const (
	ledgerTxnsPerShard = 2
	ledgerTxnsPerRun   = 6
)

// ledgerSamples is how many synced writes sample the ledger's commit.
const ledgerSamples = 5

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

// printEstimate probes spec on a real sample of Plans' rows at the spec's
// batch size, writing through the spec's sinks into a throwaway version
// that is aborted (backfill.Probe), and prints the estimated wall time on
// this machine: each run's start-up and stage measured once, plus Rows at
// the probe's rate, with its margin from the probe's slowest and fastest
// third. For Parallel > 1 a second probe runs that many pipelines side by
// side (they share the cores, so the gain is rarely parallel×). The same
// lines for `backfill --dry-run` and `validate --estimate` (one run).
func printEstimate(ctx context.Context, w io.Writer, p estimateParams) error {
	one, err := backfill.Probe(ctx, backfill.ProbeParams{Spec: p.Spec, Plans: p.Plans, Budget: probeBudget, Runs: 1, Sinks: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "probe: %d rows at batch size %d, %.0f rows/s (read, encode, infer, write %s, commit)\n",
		one.Rows, p.Spec.Model.BatchSize, one.Rate, sinkNames(p.Spec))
	fixed := one.Open + one.Stage
	runs := max(p.Runs, 1)
	txn := ledgerTxnCost(p.StateDir)
	ledger := txn * time.Duration(ledgerTxnsPerShard*p.Shards+ledgerTxnsPerRun*runs)
	fmt.Fprintf(w, "probe: start-up %s and stage %s per run, ledger %s (%d shards, %s a commit)\n",
		estDuration(one.Open), estDuration(one.Stage), estDuration(ledger), p.Shards, estDuration(txn))
	est := func(r backfill.ProbeResult, parallel int) (mid, lo, hi time.Duration) {
		waves := time.Duration((runs + parallel - 1) / parallel)
		at := func(rate float64) time.Duration {
			return waves*fixed + ledger + time.Duration(float64(p.Rows)/rate*float64(time.Second))
		}
		return at(r.Rate), at(r.High), at(r.Low)
	}
	mid, lo, hi := est(one, 1)
	if p.Parallel <= 1 {
		fmt.Fprintf(w, "estimate: %s on this machine (%s)\n", estDuration(mid), margin(one, lo, hi))
		return nil
	}
	n := min(p.Parallel, maxProbeRuns)
	rn, err := backfill.Probe(ctx, backfill.ProbeParams{Spec: p.Spec, Plans: p.Plans, Budget: probeBudget, Runs: n, Sinks: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "probe: %d runs at once, %.0f rows/s together (%.1fx one run)\n", n, rn.Rate, rn.Rate/one.Rate)
	pmid, plo, phi := est(rn, n)
	fmt.Fprintf(w, "estimate: %s on this machine, %s with --parallel %d (%s)\n",
		estDuration(mid), estDuration(pmid), p.Parallel, margin(rn, plo, phi))
	return nil
}

// sinkNames lists the spec's sinks, as the probe writes them.
func sinkNames(spec *jobs.Spec) string {
	var names []string
	if spec.Sinks.Parquet != nil {
		names = append(names, "parquet")
	}
	if spec.Sinks.Postgres != nil {
		names = append(names, "postgres")
	}
	if spec.Sinks.Redis != nil {
		names = append(names, "redis")
	}
	if len(names) == 0 {
		return "no sink"
	}
	return strings.Join(names, ", ")
}

// estDuration prints an estimate: to the second, to a tenth below 10 s
// (a short backfill's estimate would round to a large error).
func estDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// margin says the estimate's range at the probe's fastest and slowest
// third, or why there is none.
func margin(r backfill.ProbeResult, lo, hi time.Duration) string {
	if r.Low <= 0 {
		return fmt.Sprintf("no margin: the probe saw %d units, too few to compare its thirds", r.Units)
	}
	return fmt.Sprintf("%s to %s at the probe's fastest and slowest third", estDuration(lo), estDuration(hi))
}
