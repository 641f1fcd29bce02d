package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sources"
)

// ErrInterrupted means the run was stopped (Ctrl-C, SIGTERM) before it
// finished; the same command resumes it.
var ErrInterrupted = errors.New("interrupted")

// ErrTooManyRejects means more rows were rejected than max_rejected_fraction
// allows; the run failed and nothing was published.
var ErrTooManyRejects = errors.New("too many rejected rows")

// LocalOptions configures a single-machine run.
type LocalOptions struct {
	// StateDir holds the embedded ledger and the rejects (".precog").
	StateDir string
	// Parallel is the shards processed at once (default DefaultParallel of
	// the model's device).
	Parallel int
	// Restart abandons an unfinished run whose spec or model changed,
	// instead of refusing to resume it.
	Restart bool
	// Logger receives structured progress and lifecycle logs.
	Logger *slog.Logger
	// OnProgress, when set, is called about every ProgressEvery.
	OnProgress    func(Progress)
	ProgressEvery time.Duration
	// Lease is how long a claimed shard stays leased without a heartbeat.
	Lease time.Duration
	// StallTimeout fails a shard attempt whose row count has not moved for
	// this long although its heartbeats continue (a hung read or model).
	// Default 10m.
	StallTimeout time.Duration
	// Ledger, when set, is used instead of opening the embedded ledger under
	// StateDir (a scheduler that holds it open; backfill); RunLocal does
	// not close it.
	Ledger ledger.Store
	// Sinks, when set, replace the spec's sinks (embedding precog, tests).
	// RunLocal does not close them.
	Sinks []sinks.Sink
	// SkipSucceeded returns at once, with Result.AlreadyDone, when the newest
	// run of the same job and params succeeded with the same spec and model
	// (what makes `precog backfill` resumable across dates).
	SkipSucceeded bool
}

// Progress is a snapshot of a running run.
type Progress struct {
	RunID       string
	RowsDone    int64 // source rows read, including shards done before a resume
	RowsTotal   int64 // planned rows (from metadata)
	ShardsDone  int
	ShardsTotal int
	Rejected    int64
	Elapsed     time.Duration
	// Rate is rows per second over this process's lifetime (resumed shards excluded).
	Rate float64
	ETA  time.Duration
}

// Result summarises a finished run.
type Result struct {
	Run     jobs.Run
	Resumed bool
	// SkippedShards were committed by an earlier process and not recomputed.
	SkippedShards int
	// RowsThisProcess counts the source rows this process read.
	RowsThisProcess int64
	Duration        time.Duration
	// Startup is the part of Duration before the first shard could be
	// claimed: the model loaded (on a GPU, CUDA's start-up), the sinks
	// checked, the run opened.
	Startup    time.Duration
	RejectsDir string
	Outputs    []string
	// AlreadyDone is set when SkipSucceeded found the same work succeeded.
	AlreadyDone bool
	// Stages is the busy time of each pipeline stage in this process.
	Stages *StageStats
}

// DefaultParallel is the shards one process works on at once on device
// (a local run's --parallel, a worker's claim loops per device), where the
// process drives gpus GPUs in all (a worker's --devices; 1 for a run).
// On a CPU, 2: the pipeline inside a shard overlaps read, inference and
// writes, and a second shard fills the bubbles at each shard's start and
// commit (1.4x on a small model, neutral on a compute-bound one). On a
// GPU the model costs the cores nothing, and each shard in flight has one
// goroutine reading and encoding (about a core when the device keeps up)
// and its writers: half the cores, shared among the process's GPUs, at
// least gpuMinParallel, so that the device's sessions (model.sessions:
// auto gives 2) always have a unit encoded ahead of them, and at most
// gpuMaxParallel (a 128-core host would otherwise hold 64 shards' queues
// in memory for one GPU). Issue 33's H200
// (16 cores) ran the heavy job at 1.36M rows/s with the old defaults
// (1024-row batches, one shard) and 4.87M with 8 shards, 2 sessions and
// 16384-row batches: on 16 cores one GPU now gets 8 shards by default.
func DefaultParallel(device string, gpus int) int {
	if !jobs.IsGPU(device) {
		return 2
	}
	return min(gpuMaxParallel, max(gpuMinParallel, runtime.GOMAXPROCS(0)/(2*max(gpus, 1))))
}

// gpuMinParallel and gpuMaxParallel bound the shards in flight per GPU by
// default.
const (
	gpuMinParallel = 4
	gpuMaxParallel = 16
)

// withDefaults fills in every unset option: the one place defaults live.
func (o LocalOptions) withDefaults(device string) LocalOptions {
	if o.StateDir == "" {
		o.StateDir = ".precog"
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel(device, 1)
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 200 * time.Millisecond
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// localRun is one RunLocal call's open job, ledger, sinks and run.
type localRun struct {
	job   *Job
	led   ledger.Store
	snks  []sinks.Sink
	info  sinks.RunInfo
	opts  LocalOptions
	log   *slog.Logger
	res   *Result
	start time.Time
}

// RunLocal runs the whole job on this machine with the embedded ledger under
// StateDir. If an unfinished run of the same job and params exists it is
// resumed: committed shards are not recomputed. Each sink's writer lock is
// held for the whole run, and the publish is two-phase: every sink stages
// (verifying it still holds every committed shard; lost ones are
// recomputed) before any sink cuts over.
func RunLocal(ctx context.Context, spec *jobs.Spec, opts LocalOptions) (Result, error) {
	opts = opts.withDefaults(spec.Model.Device)
	start := time.Now()
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("state dir: %w", err)
	}
	job, err := OpenJob(ctx, spec)
	if err != nil {
		return Result{}, err
	}
	defer job.Close()
	led := opts.Ledger
	if led == nil {
		release, err := LockJob(opts.StateDir, spec.Name)
		if err != nil {
			return Result{}, err
		}
		defer release()
		bl, err := open.Open(ctx, open.Location{StateDir: opts.StateDir}, open.Options{})
		if err != nil {
			return Result{}, err
		}
		defer bl.Close()
		led = bl
	}
	snks := opts.Sinks
	if snks == nil {
		if snks, err = OpenSinks(ctx, spec); err != nil {
			return Result{}, err
		}
		defer func() {
			for _, s := range snks {
				s.Close()
			}
		}()
	}
	for _, s := range snks {
		if c, ok := s.(sinks.Checker); ok {
			if err := c.Check(ctx); err != nil {
				return Result{}, fmt.Errorf("sinks.%s: %w", s.Name(), err)
			}
		}
	}
	if opts.SkipSucceeded {
		if prev, ok, err := succeededRun(ctx, led, job); err != nil {
			return Result{}, err
		} else if ok {
			return Result{Run: prev, AlreadyDone: true, Outputs: outputs(spec, prev)}, nil
		}
	}
	run, resumed, err := openOrCreateRun(ctx, led, job, snks, opts, opts.Logger)
	if err != nil {
		return Result{}, err
	}
	// Recorded before any shard is claimed, so a run with a running shard
	// always names its process (status tells it interrupted once gone).
	unhold, err := writeHolder(opts.StateDir, run.ID)
	if err != nil {
		return Result{Run: run}, err
	}
	defer unhold()
	res := Result{Run: run, Resumed: resumed, RejectsDir: filepath.Join(opts.StateDir, "rejects", run.ID), Stages: &StageStats{}}
	lr := &localRun{job: job, led: led, snks: snks, opts: opts, log: opts.Logger, res: &res, start: start,
		info: sinks.NewRunInfo(spec, run, job.Output)}
	res.Startup = time.Since(start)
	err = lr.runAndPublish(ctx, run)
	res.Duration = time.Since(start)
	return res, err
}

// policy is how transient store errors are retried (retry.transient_window).
func (lr *localRun) policy() retry.Policy { return policyOf(lr.job.Spec) }

// runAndPublish holds the sinks' locks while it prepares them, executes the
// shards and publishes (the publisher, under the locks held here).
func (lr *localRun) runAndPublish(ctx context.Context, run jobs.Run) error {
	ctx, unlock, err := LockSinks(ctx, lr.snks, lr.info, sinks.ThisProcess(lr.info))
	if err != nil {
		return err
	}
	defer unlock()
	for _, s := range lr.snks {
		if err := lr.policy().Do(ctx, func(ctx context.Context) error { return s.Prepare(ctx, lr.info) }); err != nil {
			return fmt.Errorf("sink %s: prepare: %w", s.Name(), err)
		}
	}
	p := &publisher{led: lr.led, snks: lr.snks, info: lr.info, spec: lr.job.Spec, log: lr.log, locksHeld: true}
	for round := 0; ; round++ {
		if run.State != jobs.RunPublishing {
			if err := lr.execute(ctx, run, round > 0); err != nil {
				return err
			}
		}
		cur, err := lr.led.Run(ctx, run.ID)
		if err != nil {
			return err
		}
		err = p.Publish(ctx, cur)
		if err == nil {
			break
		}
		var lost *errLost
		if errors.As(err, &lost) && round < maxRecomputeRounds {
			lr.log.Warn("sinks lost committed shards; recomputing them before anything is published",
				"run", run.ID, "shards", lost.shards, "causes", lost.causes)
			if err := lr.led.Reopen(ctx, run.ID, lost.shards, lost.Error()); err != nil {
				return err
			}
			run.State = jobs.RunRunning
			continue
		}
		return lr.publishStopped(ctx, run, round, err)
	}
	if err := lr.led.SetRunState(ctx, run.ID, jobs.RunSucceeded, ""); err != nil {
		return err
	}
	runFinished(lr.info.Job, jobs.RunSucceeded)
	if lr.res.Run, err = lr.led.Run(ctx, run.ID); err != nil {
		return err
	}
	lr.res.Outputs = outputs(lr.job.Spec, lr.res.Run)
	return nil
}

// publishStopped settles a local publish that stopped with err: a held
// run is recorded held (its staged data kept for accept), a final stop
// fails the run and removes what it staged, any other leaves the run to
// the same command's rerun.
func (lr *localRun) publishStopped(ctx context.Context, run jobs.Run, round int, err error) error {
	var pe *publishError
	errors.As(err, &pe)
	var lost *errLost
	switch {
	case errors.As(err, &lost):
		err = fmt.Errorf("run %s: the sinks lost committed shards %d times in a row; nothing was published: %w", run.ID, round+1, err)
	case errors.Is(err, ErrHeld):
		runFinished(lr.info.Job, jobs.RunHeld)
		if herr := lr.led.Hold(ctx, run.ID, err.Error()); herr != nil {
			return fmt.Errorf("%w (and recording it: %w)", err, herr)
		}
		lr.res.Run, _ = lr.led.Run(ctx, run.ID)
		return err
	case pe == nil:
		return err
	case !pe.final && pe.step == "publish":
		return err
	case !pe.final:
		return fmt.Errorf("%w (nothing was published; rerun the same command to retry)", err)
	case pe.step == "stage":
		err = fmt.Errorf("run %s failed, nothing was published: %w", run.ID, err)
	case pe.step == "checks":
		err = fmt.Errorf("%w; nothing was published", err)
	case pe.step == "publish":
		err = fmt.Errorf("run %s failed: %w", run.ID, err)
	}
	abortRun(ctx, lr.led, lr.snks, lr.info, err, lr.log)
	return err
}

// execute runs every pending shard, then checks the run's rejects and moves
// it to publishing.
func (lr *localRun) execute(ctx context.Context, run jobs.Run, recompute bool) error {
	spec, log, res := lr.job.Spec, lr.log, lr.res
	shards, err := lr.led.Shards(ctx, run.ID)
	if err != nil {
		return err
	}
	var total, done int64
	var shardsDone atomic.Int64
	skipped := 0
	for _, s := range shards {
		total += s.EstRows
		if s.State == jobs.ShardCommitted {
			done += s.EstRows
			shardsDone.Add(1)
			skipped++
		}
	}
	switch {
	case recompute:
		log.Info("recomputing lost shards", "run", run.ID, "shards", len(shards)-skipped)
	case res.Resumed && skipped > 0: // a run with nothing committed starts
		res.SkippedShards = skipped
		log.Info("resuming run", "run", run.ID, "committed_shards", skipped, "shards", len(shards))
	default:
		log.Info("starting run", "run", run.ID, "version", run.Version, "shards", len(shards), "rows", total)
	}
	var rowsNow, rejected atomic.Int64
	rejected.Store(run.Counts.Rejected)
	stopProgress := startProgress(ctx, lr.opts, func() Progress {
		p := Progress{RunID: run.ID, RowsDone: done + rowsNow.Load(), RowsTotal: total,
			ShardsDone: int(shardsDone.Load()), ShardsTotal: len(shards), Rejected: rejected.Load(),
			Elapsed: time.Since(lr.start)}
		if secs := p.Elapsed.Seconds(); secs > 0 {
			p.Rate = float64(rowsNow.Load()) / secs
		}
		if p.Rate > 0 && p.RowsTotal > p.RowsDone {
			p.ETA = time.Duration(float64(p.RowsTotal-p.RowsDone) / p.Rate * float64(time.Second))
		}
		return p
	})
	maxRejected := spec.MaxRejected() * float64(total)
	err = lr.runShards(ctx, run, func(n int64) { rowsNow.Add(n) },
		func(c jobs.Counts) error {
			shardsDone.Add(1)
			if r := rejected.Add(c.Rejected); float64(r) > maxRejected {
				return fmt.Errorf("%w: %d rejected so far, more than max_rejected_fraction %g of %d planned rows (see %s)",
					ErrTooManyRejects, r, spec.MaxRejected(), total, res.RejectsDir)
			}
			return nil
		})
	stopProgress()
	res.RowsThisProcess += rowsNow.Load()
	if err != nil {
		if errors.Is(err, ErrTooManyRejects) {
			abortRun(ctx, lr.led, lr.snks, lr.info, err, log)
		}
		return err
	}
	if run, err = lr.led.Run(ctx, run.ID); err != nil {
		return err
	}
	res.Run = run
	if float64(run.Counts.Rejected) > spec.MaxRejected()*float64(run.Counts.RowsIn) {
		err := fmt.Errorf("%w: %d of %d rows rejected, more than max_rejected_fraction %g (see %s)",
			ErrTooManyRejects, run.Counts.Rejected, run.Counts.RowsIn, spec.MaxRejected(), res.RejectsDir)
		abortRun(ctx, lr.led, lr.snks, lr.info, err, log)
		return err
	}
	return lr.claimPublish(ctx, run.ID)
}

// localPublishLease is the publish lease of a local run: its publish step
// cuts the sinks over in seconds, and a resume after a crash publishes
// without claiming again.
const localPublishLease = 10 * time.Minute

// claimPublish moves the run to publishing under a publish lease, so that
// a `precog cancel` from another process of the state dir is refused
// (ledger.ErrPublishing) instead of cancelling a run whose sinks are
// cutting over.
func (lr *localRun) claimPublish(ctx context.Context, runID string) error {
	r, err := lr.led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: runID, Worker: ledger.ProcessName(), Lease: localPublishLease})
	switch {
	case errors.Is(err, ledger.ErrRunFinished) && r.State.Terminal():
		return endedBeforePublish(r)
	case err != nil:
		return fmt.Errorf("run %s: take the publish step: %w", runID, err)
	}
	return nil
}

// endedBeforePublish is the error of a run that another process ended
// (precog cancel, a dashboard) after its last shard committed and before
// this one took the publish step: what the ledger says happened, rather
// than "take the publish step: run finished", which reads as if it
// published.
func endedBeforePublish(r jobs.Run) error {
	var msg string
	switch r.State {
	case jobs.RunSucceeded:
		msg = fmt.Sprintf("run %s succeeded before this process could publish it: another process published it", r.ID)
	case jobs.RunFailed:
		msg = fmt.Sprintf("run %s failed after its last shard committed, before its publish: nothing was published", r.ID)
	default:
		msg = fmt.Sprintf("run %s was %s after its last shard committed, before its publish: nothing was published", r.ID, r.State)
	}
	if r.Error != "" {
		msg += " (" + r.Error + ")"
	}
	return &endedError{msg: msg}
}

// succeededRun reports whether the newest run of the job with the same
// params succeeded with the same spec and model.
// checkUnchanged refuses to resume run when its spec, its model or its
// source changed since it was planned: resuming would publish a mix, or
// silently leave out files added since. It points at --restart.
func checkUnchanged(ctx context.Context, led ledger.Ledger, job *Job, run jobs.Run) error {
	spec := job.Spec
	changed := ""
	if run.SpecHash != spec.Hash() {
		changed = "the job spec changed"
	} else if run.ModelVersion != job.Model.Version() {
		changed = fmt.Sprintf("the model changed (version %s, the run has %s)", job.Model.Version(), run.ModelVersion)
	} else {
		plans, err := job.Source.Plan(ctx, spec.Source.RowsPerShard)
		if err != nil {
			return fmt.Errorf("re-plan the source to resume run %s: %w", run.ID, err)
		}
		shards, err := led.Shards(ctx, run.ID)
		if err != nil {
			return err
		}
		if diff := planDiff(shards, plans); diff != "" {
			changed = "the source changed since it was planned (" + diff + ")"
		}
	}
	if changed == "" {
		return nil
	}
	return fmt.Errorf("run %s of %s is unfinished but %s; rerun with --restart to abandon it and start a new run", run.ID, spec.Name, changed)
}

// planDiff describes how a fresh plan differs from a run's shards ("" when
// it is the same plan).
func planDiff(shards []jobs.Shard, plans []sources.ShardPlan) string {
	var oldRows int64
	newRows := sources.PlannedRows(plans)
	differ := len(shards) != len(plans)
	for i, s := range shards {
		oldRows += s.EstRows
		if i < len(plans) && !bytes.Equal(s.Plan, plans[i].Plan) {
			differ = true
		}
	}
	if !differ {
		return ""
	}
	return fmt.Sprintf("it now plans %d shards and %d rows; the run has %d shards and %d rows", len(plans), newRows, len(shards), oldRows)
}

func succeededRun(ctx context.Context, led ledger.Ledger, job *Job) (jobs.Run, bool, error) {
	runs, err := led.Runs(ctx, job.Spec.Name, 0)
	if err != nil {
		return jobs.Run{}, false, err
	}
	key := jobs.ParamsKey(job.Spec.Params)
	for _, r := range runs { // newest first
		if r.ParamsKey != key {
			continue
		}
		ok := r.State == jobs.RunSucceeded && r.SameWork(job.Spec, job.Model.Version())
		return r, ok, nil
	}
	return jobs.Run{}, false, nil
}

// openOrCreateRun finds the unfinished run of (job, params) to resume, or
// plans and creates a new one.
func openOrCreateRun(ctx context.Context, led ledger.Store, job *Job, snks []sinks.Sink, opts LocalOptions, log *slog.Logger) (jobs.Run, bool, error) {
	spec := job.Spec
	paramsKey := jobs.ParamsKey(spec.Params)
	run, err := led.OpenRun(ctx, spec.Name, paramsKey)
	switch {
	case err == nil && opts.Restart:
		info := sinks.NewRunInfo(spec, run, job.Output)
		log.Info("abandoning the unfinished run (--restart)", "run", run.ID)
		runStores{led: led, snks: snks, info: info, log: log}.end(ctx, jobs.RunCancelled, errors.New("abandoned by --restart"))
	case err == nil:
		if err := checkUnchanged(ctx, led, job, run); err != nil {
			return run, false, err
		}
		// Only this process runs this job of the state dir (LockJob):
		// leases of a killed earlier process are stale, release them now.
		shards, err := led.Shards(ctx, run.ID)
		if err != nil {
			return run, false, err
		}
		for _, s := range shards {
			if s.State == jobs.ShardRunning {
				if err := led.Release(ctx, ledger.ReleaseParams{RunID: run.ID, Shard: s.Index, Worker: s.Worker}); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
					return run, false, err
				}
			}
		}
		if n, err := led.RetryFailed(ctx, run.ID); err != nil {
			return run, false, err
		} else if n > 0 {
			log.Info("retrying failed shards", "run", run.ID, "shards", n)
		}
		return run, true, nil
	case !errors.Is(err, ledger.ErrNotFound):
		return run, false, err
	}

	run, shards, err := PlanRun(ctx, job)
	if err != nil {
		return run, false, err
	}
	if err := led.CreateRun(ctx, run, shards); err != nil {
		return run, false, err
	}
	return run, false, nil
}

// PlanRun plans a new run of job (from source metadata only) with a fresh
// version: what `precog run` and `precog submit` store in the ledger. The
// run records the spec as written (before ${ENV} expansion, so no secret
// reaches the ledger), the model's version and the spec's pool and priority.
func PlanRun(ctx context.Context, job *Job) (jobs.Run, []jobs.Shard, error) {
	spec := job.Spec
	plans, err := job.Source.Plan(ctx, spec.Source.RowsPerShard)
	if err != nil {
		return jobs.Run{}, nil, fmt.Errorf("plan: %w", err)
	}
	run, shards := NewRun(spec, NewRunOptions{ModelVersion: job.Model.Version(), Plans: plans})
	return run, shards, nil
}

// localMode is the executor's mode of a local run: opts.Parallel claim
// loops claim the one run's shards until none is left, the run is
// interrupted or a shard fails for good.
type localMode struct {
	lr     *localRun
	run    jobs.Run
	cancel context.CancelCauseFunc
	// onRows is called as rows are read; onDone after each commit (an
	// error stops the run: the reject limit).
	onRows func(int64)
	onDone func(jobs.Counts) error

	mu     sync.Mutex
	failed []string // shards out of attempts
}

// runShards runs the claim loops and returns why they stopped: nil when
// every shard committed.
func (lr *localRun) runShards(ctx context.Context, run jobs.Run, onRows func(int64), onDone func(jobs.Counts) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m := &localMode{lr: lr, run: run, cancel: cancel, onRows: onRows, onDone: onDone}
	ex := &executor{led: lr.led, lease: lr.opts.Lease, stall: lr.opts.StallTimeout, log: lr.log}
	var wg sync.WaitGroup
	for slot := range lr.opts.Parallel {
		// Each loop holds its leases under its own name, as a worker's do
		// (the dashboard's timeline draws one lane per name).
		holder := ledger.HolderName(ledger.ProcessName(), lr.job.Spec.Model.Device, slot)
		wg.Go(func() { ex.loop(ctx, ctx, holder, m, nil) })
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
			return fmt.Errorf("run %s %w: committed shards are kept; rerun the same command to resume", run.ID, ErrInterrupted)
		}
		if errors.Is(cause, ledger.ErrRunFinished) {
			return lr.endedElsewhere(context.WithoutCancel(ctx), run.ID, cause)
		}
		return cause
	}
	if len(m.failed) > 0 {
		return fmt.Errorf("run %s: %d shard(s) failed after %d attempts; rerun the same command to retry them:\n  %s",
			run.ID, len(m.failed), lr.job.Spec.Retry.MaxAttempts, strings.Join(m.failed, "\n  "))
	}
	return nil
}

// endedElsewhere is the error of a run that another process ended while
// this one worked on it (precog cancel, a dashboard): the run's state and
// why, as `precog run --db` says it, rather than the error of the attempt
// that found out (cause, kept when the ledger cannot be read).
func (lr *localRun) endedElsewhere(ctx context.Context, id string, cause error) error {
	r, err := lr.led.Run(ctx, id)
	if err != nil || !r.State.Terminal() {
		return cause
	}
	msg := fmt.Sprintf("run %s %s", id, r.State)
	if r.Error != "" {
		msg += ": " + r.Error
	}
	return &endedError{msg: msg}
}

// endedError is a run ended by another process; it is a
// ledger.ErrRunFinished.
type endedError struct{ msg string }

func (e *endedError) Error() string { return e.msg }
func (e *endedError) Unwrap() error { return ledger.ErrRunFinished }

func (m *localMode) claim(ctx context.Context, worker string) (shardTask, error) {
	lr := m.lr
	sh, err := lr.led.Claim(ctx, m.run.ID, worker, lr.opts.Lease)
	return shardTask{run: m.run, shard: sh, job: lr.job, snks: lr.snks, info: lr.info,
		rejectsDir: filepath.Join(lr.opts.StateDir, "rejects", m.run.ID), keepRejects: ledger.DefaultRejectsPerRun,
		stats: lr.res.Stages, onRows: m.onRows}, err
}

// idle: every shard is claimed or done; this loop's work is over.
func (m *localMode) idle(context.Context, string) bool { return false }

func (m *localMode) claimFailed(_ context.Context, _ string, err error, _ int) bool {
	m.cancel(err)
	return false
}

// settled stops the run at a permanent error or a ledger that cannot
// record an outcome, and notes the shards out of attempts (the other
// shards go on; the run fails once they are done).
func (m *localMode) settled(_ context.Context, _ string, t shardTask, r attemptResult) bool {
	switch r.outcome {
	case outCommitted:
		if err := m.onDone(r.counts); err != nil {
			m.cancel(err)
			return false
		}
		return true
	case outRetried:
		return true
	case outReleased:
		return false
	case outLost:
		if r.ledgerOp != "" {
			m.cancel(fmt.Errorf("shard %d: %s: %w", t.shard.Index, r.ledgerOp, r.err))
		} else {
			m.cancel(r.err)
		}
		return false
	case outPermanent:
		// Retrying cannot help (a full disk, a permission, bad data): fail
		// at once with the cause.
		m.cancel(fmt.Errorf("%w (a permanent error: not retried; nothing was published)", r.err))
		return false
	}
	if r.exhausted {
		m.mu.Lock()
		m.failed = append(m.failed, shardFailure(t, r))
		m.mu.Unlock()
	}
	return true
}

// abortRun marks the run failed and removes what it wrote from every sink.
func abortRun(ctx context.Context, led ledger.Store, snks []sinks.Sink, info sinks.RunInfo, cause error, log *slog.Logger) {
	runStores{led: led, snks: snks, info: info, log: log}.end(ctx, jobs.RunFailed, cause)
}

// runStores is what ending a run touches: its ledger record and every
// sink it wrote to.
type runStores struct {
	led  ledger.Store
	snks []sinks.Sink
	info sinks.RunInfo
	log  *slog.Logger
}

// end moves an unpublished run to a terminal state (failed, cancelled) and
// removes what it wrote from every sink, so no orphan tables, keys or
// staging directories are left behind.
func (r runStores) end(ctx context.Context, state jobs.RunState, cause error) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	runFinished(r.info.Job, state)
	if err := r.led.SetRunState(actx, r.info.RunID, state, cause.Error()); err != nil {
		r.log.Warn("mark run failed", "run", r.info.RunID, "err", err)
	}
	for _, s := range r.snks {
		if err := s.Abort(actx, r.info); err != nil {
			r.log.Warn("abort sink", "sink", s.Name(), "run", r.info.RunID, "err", err)
		}
	}
}

func startProgress(ctx context.Context, opts LocalOptions, snapshot func() Progress) (stop func()) {
	if opts.OnProgress == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(opts.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				opts.OnProgress(snapshot())
				return
			case <-ctx.Done():
				return
			case <-t.C:
				opts.OnProgress(snapshot())
			}
		}
	}()
	return func() { close(done); <-finished }
}

func outputs(spec *jobs.Spec, run jobs.Run) []string {
	var out []string
	if p := spec.Sinks.Parquet; p != nil {
		out = append(out, "parquet: "+p.Path)
	}
	if p := spec.Sinks.Postgres; p != nil {
		out = append(out, fmt.Sprintf("postgres: %s.%s (%s)", p.Schema, p.Table, p.Mode))
	}
	if r := spec.Sinks.Redis; r != nil {
		if r.Publish == jobs.RedisPublishInPlace {
			out = append(out, fmt.Sprintf("redis: %s:{key}", r.Namespace))
		} else {
			out = append(out, fmt.Sprintf("redis: %s:%s:{key} (current → %s)", r.Namespace, run.Version, run.Version))
		}
	}
	return out
}
