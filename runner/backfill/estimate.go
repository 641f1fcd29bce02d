package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sources"
)

// PartitionPlan is one value as `backfill --dry-run` lists it: found or
// missing, with rows and shards from metadata.
type PartitionPlan struct {
	Value  string `json:"value"`
	Found  bool   `json:"found"`
	Error  string `json:"error,omitempty"`
	Rows   int64  `json:"rows"`
	Shards int    `json:"shards"`
}

// PlanPartitions plans every value without reading data; a value whose
// source is missing is listed with its error, not returned as one.
func PlanPartitions(ctx context.Context, parts []Partition) ([]PartitionPlan, map[string][]sources.ShardPlan) {
	out := make([]PartitionPlan, len(parts))
	plans := map[string][]sources.ShardPlan{}
	for i, p := range parts {
		out[i].Value = p.Value
		src, err := runner.OpenSource(ctx, p.Spec)
		if err == nil {
			var ps []sources.ShardPlan
			if ps, err = src.Plan(ctx, p.Spec.Source.RowsPerShard); err == nil {
				out[i].Found, out[i].Shards = true, len(ps)
				for _, s := range ps {
					out[i].Rows += s.Rows
				}
				plans[p.Value] = ps
			}
		}
		if err != nil {
			out[i].Error = err.Error()
		}
	}
	return out, plans
}

// discard drops rejected rows (a probe keeps nothing).
type discard struct{}

func (discard) Reject(string, string, string) error { return nil }

// ProbeParams says what Probe measures.
type ProbeParams struct {
	Spec *jobs.Spec
	// Plans are the shards to sample from (the first Runs of them, cycling).
	Plans []sources.ShardPlan
	// Budget bounds the streaming part of the probe: after it every
	// pipeline's reader ends, so its rows drain through every stage and
	// every sink writer commits, as at the end of a real shard.
	Budget time.Duration
	// Runs is how many pipelines run at once, each with its own model
	// sessions, as `backfill --parallel` runs values (default 1).
	Runs int
	// Sinks writes the probe's output through the spec's real sinks into a
	// throwaway version that is aborted afterwards (never published).
	Sinks bool
}

// probeWindows is how many consecutive parts of the probe's progress the
// rate is also measured in: the slowest and fastest say its margin.
const probeWindows = 3

// ProbeResult is what a probe measured.
type ProbeResult struct {
	// Rows went through every stage, sinks' writes and commits included.
	Rows int64
	// Rate is Rows per second of the streaming part (all Runs together).
	Rate float64
	// Low and High are the slowest and fastest rate of the probe's windows;
	// 0 where it saw too few units for a margin (Units).
	Low, High float64
	// Units is how many pipeline units the probe saw inferred.
	Units int
	// Open is the per-run start-up: source, model and sinks opened, the
	// sinks' Prepare.
	Open time.Duration
	// Stage is the sinks' Stage of the probe's rows (1 run only; 0 else).
	Stage time.Duration
	// Batch is the rows per inference call of the probe's model
	// (model.batch_size, or the device's choice).
	Batch int
}

// Probe measures spec's read → encode → infer → write pipeline at the
// spec's batch size on real samples, with Runs pipelines at once sharing
// this machine. With Sinks the rows are written through each sink's real
// writer into a fresh version (jobs.NewVersion, never published) that is
// aborted before Probe returns, whatever happens; a probe stopped before
// that leaves an unpublished orphan version that `precog gc` removes.
func Probe(ctx context.Context, p ProbeParams) (ProbeResult, error) {
	var res ProbeResult
	if len(p.Plans) == 0 {
		return res, errors.New("probe: no shard to sample")
	}
	n := max(p.Runs, 1)
	t0 := time.Now()
	jobsOpen := make([]*runner.Job, 0, n)
	defer func() {
		for _, j := range jobsOpen {
			j.Close()
		}
	}()
	for range n {
		job, err := runner.OpenJob(ctx, p.Spec)
		if err != nil {
			return res, err
		}
		jobsOpen = append(jobsOpen, job)
	}
	version := jobs.NewVersion(time.Now()).String()
	// The probe is a run of the spec as loaded, never recorded.
	probe := jobs.Run{ID: "probe-" + version, Job: p.Spec.Name, Version: version, Params: p.Spec.Params}
	info := sinks.NewRunInfo(p.Spec, probe, jobsOpen[0].Output)
	var snks []sinks.Sink
	if p.Sinks {
		var err error
		if snks, err = openProbeSinks(ctx, p.Spec, info); err != nil {
			return res, err
		}
		defer abortProbeSinks(ctx, snks, info)
	}
	res.Open = time.Since(t0) / time.Duration(n)
	res.Batch = jobsOpen[0].Model.BatchRows()
	counts, err := streamProbe(ctx, p, jobsOpen, snks, info, &res)
	if err != nil {
		return res, err
	}
	if len(snks) > 0 && n == 1 {
		t1 := time.Now()
		for _, s := range snks {
			if err := s.Stage(ctx, info, counts); err != nil {
				return res, fmt.Errorf("probe: %s sink: stage: %w", s.Name(), err)
			}
		}
		res.Stage = time.Since(t1)
	}
	return res, nil
}

// openProbeSinks opens the spec's sinks and prepares the probe's version.
func openProbeSinks(ctx context.Context, spec *jobs.Spec, info sinks.RunInfo) ([]sinks.Sink, error) {
	snks, err := runner.OpenSinks(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	for _, s := range snks {
		if err := s.Prepare(ctx, info); err != nil {
			abortProbeSinks(ctx, snks, info)
			return nil, fmt.Errorf("probe: %s sink: %w", s.Name(), err)
		}
	}
	return snks, nil
}

// probeAbortTimeout bounds the abort of the probe's version.
const probeAbortTimeout = 30 * time.Second

// abortProbeSinks drops everything the probe wrote and closes the sinks,
// even when ctx has ended (an interrupted dry run).
func abortProbeSinks(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeAbortTimeout)
	defer cancel()
	for _, s := range snks {
		if err := s.Abort(actx, info); err != nil {
			slog.Warn("probe: abort of the probe's version failed; `precog gc` removes it", "sink", s.Name(), "version", info.Version, "err", err)
		}
		s.Close()
	}
}

// streamProbe runs one pipeline per job at once, each working through its
// share of the plans (pipeline i takes plans i, i+n, …; a pipeline with no
// plan of its own samples plan i mod len) as whole shard attempts, commits
// included, until p.Budget has passed: the last attempt's reader then ends.
// It fills res's rows and rates and returns what the attempts committed.
func streamProbe(ctx context.Context, p ProbeParams, jobsOpen []*runner.Job, snks []sinks.Sink, info sinks.RunInfo, res *ProbeResult) ([]sinks.CommittedShard, error) {
	n := len(jobsOpen)
	start := time.Now()
	deadline := start.Add(p.Budget)
	win := newWindows(start)
	errs := make([]error, n)
	committed := make([][]sinks.CommittedShard, n)
	var wg sync.WaitGroup
	for i, job := range jobsOpen {
		job.Source = untilSource{Source: job.Source, deadline: deadline}
		wg.Go(func() {
			for idx := i; idx == i || (idx < len(p.Plans) && time.Now().Before(deadline)); idx += n {
				plan := p.Plans[idx%len(p.Plans)]
				c, err := job.ExecShard(ctx, runner.ShardTask{
					Run: info, Sinks: snks,
					Shard: jobs.Shard{RunID: info.RunID, Index: idx, Plan: plan.Plan, EstRows: plan.Rows}, Rejects: discard{},
					ComputedAt: start, OnRows: win.add,
				})
				if err != nil {
					errs[i] = err
					return
				}
				committed[i] = append(committed[i], sinks.CommittedShard{Index: idx, Rows: c.RowsOut})
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	res.Rows = win.total()
	if res.Rows == 0 || took <= 0 {
		return nil, errors.New("probe: no row read within the budget")
	}
	res.Rate = float64(res.Rows) / took.Seconds()
	res.Low, res.High = win.spread(res.Rate, probeWindows)
	res.Units = win.count()
	return slices.Concat(committed...), nil
}

// untilSource is a source whose readers end (io.EOF) once deadline has
// passed, so that a probe's shard attempt ends as a real one does: its
// rows drain through every stage and every writer commits.
type untilSource struct {
	sources.Source
	deadline time.Time
}

func (u untilSource) Open(ctx context.Context, plan json.RawMessage, opts sources.ReadOptions) (sources.BatchReader, error) {
	r, err := u.Source.Open(ctx, plan, opts)
	if err != nil {
		return nil, err
	}
	return untilReader{BatchReader: r, deadline: u.deadline}, nil
}

type untilReader struct {
	sources.BatchReader
	deadline time.Time
}

func (u untilReader) Next(ctx context.Context) (arrow.RecordBatch, error) {
	if !time.Now().Before(u.deadline) {
		return nil, io.EOF
	}
	return u.BatchReader.Next(ctx)
}

// minEventsPerWindow is the fewest progress events a window of the
// probe's margin holds.
const minEventsPerWindow = 3

// maxProbeEvents bounds the progress events a probe keeps: past it,
// neighbours merge (the spread needs few).
const maxProbeEvents = 4096

// windows records a probe's progress events: rows inferred, and when.
type windows struct {
	start  time.Time
	mu     sync.Mutex
	events []probeEvent
}

type probeEvent struct {
	at   time.Duration // since start
	rows int64
}

func newWindows(start time.Time) *windows { return &windows{start: start} }

// add records n rows inferred now.
func (w *windows) add(n int64) {
	at := time.Since(w.start)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == maxProbeEvents {
		half := w.events[:0]
		for i := 0; i+1 < len(w.events); i += 2 {
			half = append(half, probeEvent{at: w.events[i+1].at, rows: w.events[i].rows + w.events[i+1].rows})
		}
		w.events = half
	}
	w.events = append(w.events, probeEvent{at: at, rows: n})
}

func (w *windows) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

func (w *windows) total() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var t int64
	for _, e := range w.events {
		t += e.rows
	}
	return t
}

// spread splits the events into at most k consecutive groups of at least
// minEventsPerWindow events and returns the slowest and fastest group's
// rate (its rows over the time since the group before it ended), each
// scaled by rate over the groups' overall rate, so that the drain and
// commits after the last event weigh on them as on the probe's rate.
// Fewer than two such groups give no margin (0, 0): inference sessions
// finish units in bursts, and a window of one or two units would measure
// the burst, not the machine.
func (w *windows) spread(rate float64, k int) (low, high float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.events)
	if k = min(k, n/minEventsPerWindow); k < 2 {
		return 0, 0
	}
	var total int64
	var prev time.Duration
	rates := make([]float64, 0, k)
	for g := range k {
		var r int64
		for _, e := range w.events[g*n/k : (g+1)*n/k] {
			r += e.rows
		}
		total += r
		end := w.events[(g+1)*n/k-1].at
		rates = append(rates, float64(r)/max(end-prev, time.Microsecond).Seconds())
		prev = end
	}
	scale := rate / (float64(total) / max(prev, time.Microsecond).Seconds())
	return slices.Min(rates) * scale, slices.Max(rates) * scale
}
