package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/precog-ml/precog/internal/buildinfo"
	"github.com/precog-ml/precog/internal/retry"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// WorkerOptions configures a pool worker (`precog worker`).
type WorkerOptions struct {
	// Pool is the worker pool whose runs this worker executes ("default").
	Pool string
	// Devices are where shards run ("cpu", "cuda:0", …), each with its own
	// claim loops. Default cpu.
	Devices []string
	// Parallel is the claim loops per device, each holding one shard at a
	// time: the shards in flight on it (0: DefaultParallel for the device
	// among this worker's GPUs).
	Parallel int
	// ID names the worker in leases, logs and status (default host-pid);
	// each claim loop holds leases as ledger.HolderName(ID, device, slot).
	ID string
	// Lease is how long a claimed shard stays leased without a heartbeat.
	Lease time.Duration
	// PublishLease bounds the publish step without a heartbeat (default
	// Lease).
	PublishLease time.Duration
	// DrainTimeout is how long in-flight shards may run on after the worker
	// is told to stop (SIGTERM) before they are released.
	DrainTimeout time.Duration
	// StallTimeout fails an attempt that read no row for this long.
	StallTimeout time.Duration
	// StateDir is the worker's state directory (rejects live in the
	// ledger, not here).
	StateDir string
	// Version is the worker binary's version, shown in the ledger's list
	// of workers. Default: this binary's (buildinfo's short form).
	Version string
	// RejectsPerRun bounds the rejects of one shard attempt kept for the
	// ledger (which stores at most its own per-run cap). Default
	// ledger.DefaultRejectsPerRun.
	RejectsPerRun int
	// OpenRuns bounds the runs kept open (sinks prepared) per device: a
	// small LRU, so that memory stays bounded. Default 4.
	OpenRuns int
	// Models bounds the loaded models no open run uses, per device: a
	// small LRU keyed by the model file's hash, spec and device, so that
	// the next run of a job (a schedule's next tick, a backfill's next
	// date) reuses the sessions. Default 2.
	Models int
	Logger *slog.Logger
	// OnShard, when set, is called after each shard attempt (metrics).
	OnShard func(ShardEvent)
	// Run, when set, restricts the worker to that run's shards (`precog
	// run --db` joining a run), and Run returns once the run is finished.
	Run string
}

// ShardEvent reports one finished shard attempt.
type ShardEvent struct {
	Run, Worker string
	Shard       int
	Outcome     string // committed | released | failed | lost | unable (the run does not load here)
	Counts      jobs.Counts
	Duration    time.Duration
	Stats       *StageStats
}

func (o WorkerOptions) withDefaults() WorkerOptions {
	o.Pool = jobs.PoolOrDefault(o.Pool)
	if len(o.Devices) == 0 {
		o.Devices = []string{jobs.DeviceCPU}
	}
	if o.ID == "" {
		o.ID = ledger.ProcessName()
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.PublishLease <= 0 {
		// As short as a shard's lease (renewed just as often): a killed
		// publisher must not hold a finished run for longer than a killed
		// shard holder holds its shard.
		o.PublishLease = o.Lease
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = time.Minute
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.StateDir == "" {
		o.StateDir = ".precog"
	}
	if o.Version == "" {
		o.Version = buildinfo.Current(buildinfo.Runtime{}).Short()
	}
	if o.OpenRuns <= 0 {
		o.OpenRuns = 4
	}
	if o.Models <= 0 {
		o.Models = 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RejectsPerRun <= 0 {
		o.RejectsPerRun = ledger.DefaultRejectsPerRun
	}
	return o
}

// Worker executes shards of any run in its pool, through the cluster
// ledger: the same shard pipeline and two-phase publish as `precog run`.
type Worker struct {
	led  ledger.Store
	opts WorkerOptions
	log  *slog.Logger
	runs *runCache
	// pres is this worker's row in the ledger's list of workers.
	pres *presence
	// claimErr is the last claim attempt's error (nil: it succeeded or
	// found nothing to claim), for Ready.
	claimErr atomic.Pointer[error]
	// exec runs the claim loops (one per device).
	exec *executor
	// unable are the runs this worker cannot execute, passed over.
	unable *unableRuns
	// cleaner finishes cancelled runs' pending sink cleanups.
	cleaner cleaner
	// working is true from Run's start until its context ends (Probe).
	working atomic.Bool
}

// NewWorker builds a worker over led.
func NewWorker(led ledger.Store, opts WorkerOptions) *Worker {
	opts = opts.withDefaults()
	models := newModelCache(opts.Models * len(opts.Devices))
	return &Worker{led: led, opts: opts, log: opts.Logger, runs: newRunCache(opts.OpenRuns*len(opts.Devices), models, opts.Logger), pres: newPresence(), unable: newUnableRuns(),
		exec: &executor{led: led, lease: opts.Lease, stall: opts.StallTimeout, log: opts.Logger, onShard: opts.OnShard}}
}

// Run claims and executes shards until ctx ends (SIGTERM): then it stops
// claiming, lets in-flight shards finish within DrainTimeout, releases
// what is left and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	defer w.runs.closeAll()
	w.working.Store(ctx.Err() == nil)
	defer w.working.Store(false)
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	stopDrain := context.AfterFunc(ctx, func() {
		w.working.Store(false)
		w.log.Info("draining: no new shards; in-flight shards finish or are released", "drain_timeout", w.opts.DrainTimeout)
		time.AfterFunc(w.opts.DrainTimeout, stopWork)
	})
	defer stopDrain()
	beating, stopBeating := context.WithCancel(context.WithoutCancel(ctx))
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		w.heartbeat(beating)
	}()
	defer func() {
		stopBeating()
		<-beatDone
	}()
	var wg sync.WaitGroup
	for _, dev := range w.opts.Devices {
		for slot := range w.parallel(dev) {
			wg.Go(func() { w.loop(ctx, work, dev, slot) })
		}
	}
	wg.Wait()
	return nil
}

// parallel is the claim loops on dev: opts.Parallel, or DefaultParallel
// with the cores shared among this worker's GPUs.
func (w *Worker) parallel(dev string) int {
	if w.opts.Parallel > 0 {
		return w.opts.Parallel
	}
	gpus := 0
	for _, d := range w.opts.Devices {
		if jobs.IsGPU(d) {
			gpus++
		}
	}
	return DefaultParallel(dev, gpus)
}

// claimTimeout bounds one claim call of a worker's claim loop.
const claimTimeout = 30 * time.Second

// workerMode is the executor's mode of a worker's claim loop on one
// device: it claims the shards of any run of the pool (or of opts.Run),
// publishes a run after its last commit and, when idle, the runs due.
type workerMode struct {
	w      *Worker
	device string
	// slot numbers the device's claim loops (presence keeps each one's shard).
	slot int
	work context.Context // outlives the claim loop's context by the drain
	wake <-chan struct{}
}

// loop is one of a device's claim loops, with its own holder name in the
// ledger (ledger.HolderName); the device's loops share its open runs and
// models.
func (w *Worker) loop(ctx, work context.Context, device string, slot int) {
	id := ledger.HolderName(w.opts.ID, device, slot)
	wake := w.led.Wake(ctx, w.opts.Pool)
	if slot == 0 {
		w.log.Info("worker ready", "worker", id, "pool", w.opts.Pool, "device", device, "shards_in_flight", w.parallel(device))
	}
	w.exec.loop(ctx, work, id, &workerMode{w: w, device: device, slot: slot, work: work, wake: wake}, wake)
}

func (m *workerMode) claim(ctx context.Context, id string) (shardTask, error) {
	w := m.w
	began := time.Now()
	if w.opts.Run != "" {
		// The one run this worker serves is one it cannot execute: back off.
		if d := w.unable.wait(w.opts.Run, time.Now()); d > 0 {
			sleepCtx(ctx, d)
		}
	}
	if err := ctx.Err(); err != nil {
		return shardTask{}, err
	}
	// The claim is not cut short by a drain: a claim cancelled in flight may
	// still commit in the ledger, leaving a shard leased to a worker that
	// has stopped until the lease runs out. It runs to its end (bounded),
	// and a shard claimed as the drain began goes straight back.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	run, sh, err := w.claim(cctx, id)
	cancel()
	if err == nil && ctx.Err() != nil {
		_ = w.led.Release(context.WithoutCancel(ctx), ledger.ReleaseParams{RunID: run.ID, Shard: sh.Index, Worker: id})
		err = ctx.Err()
	}
	claimSeconds.Observe(time.Since(began).Seconds())
	w.noteClaim(ctx, err)
	if err != nil {
		return shardTask{}, err
	}
	w.pres.hold(m.device, m.slot, run.ID, sh.Index)
	or, err := w.runs.open(m.work, run, m.device)
	if err != nil {
		w.runs.release(or)
		w.cannotExecute(context.WithoutCancel(m.work), id, run, sh, err)
		w.exec.report(ShardEvent{Run: run.ID, Worker: id, Shard: sh.Index, Outcome: "unable", Duration: time.Since(began)})
		w.pres.hold(m.device, m.slot, "", 0)
		return shardTask{}, errClaimSettled
	}
	w.unable.clear(run.ID)
	return shardTask{run: run, shard: sh, job: or.job, snks: or.snks, info: or.info, keepRejects: w.opts.RejectsPerRun,
		done: func() { w.runs.release(or); w.pres.hold(m.device, m.slot, "", 0) }}, nil
}

// idle publishes what is due (opts.Run: that run, and stops once it
// ended) and waits for work.
func (m *workerMode) idle(ctx context.Context, id string) bool {
	w := m.w
	if w.opts.Run != "" {
		w.tryPublish(m.work, id, w.opts.Run)
		if r, err := w.led.Run(ctx, w.opts.Run); err == nil && r.State.Terminal() {
			return false
		}
	} else {
		w.publishDue(ctx, m.work, id)
		w.finishCleanups(m.work)
	}
	w.waitWork(ctx, m.wake)
	return ctx.Err() == nil
}

func (m *workerMode) claimFailed(ctx context.Context, id string, err error, failures int) bool {
	if m.w.opts.Run != "" && errors.Is(err, ledger.ErrRunFinished) {
		return false
	}
	d := retry.Policy{}.Delay(failures)
	m.w.log.Warn("claim failed; retrying", "worker", id, "err", err, "in", d)
	sleepCtx(ctx, d)
	return true
}

// settled ends the run when a shard failed for good (a permanent error,
// or its last attempt): nothing is published and the sinks are cleaned
// (after retry.keep_failed for a shard out of attempts: endRunAfter).
// After a commit it enforces the reject limit and tries the publish step.
func (m *workerMode) settled(ctx context.Context, id string, t shardTask, r attemptResult) bool {
	w := m.w
	switch {
	case r.outcome == outCommitted:
		if r.counts.Rejected > 0 && w.enforceRejectLimit(context.WithoutCancel(ctx), t) {
			return true
		}
		w.tryPublish(ctx, id, t.run.ID)
	case r.outcome == outPermanent || r.outcome == outFailed && r.exhausted:
		cause := fmt.Errorf("shard %d failed on worker %s after %d attempt(s): %w", t.shard.Index, id, t.shard.Attempts, r.err)
		endRunAfter(context.WithoutCancel(ctx), w.led, t, r, cause, w.log)
	}
	return true
}

// waitWork waits for a wake notice of the pool, or for the end of the
// backoff of a run this worker could not execute, to claim again.
func (w *Worker) waitWork(ctx context.Context, wake <-chan struct{}) {
	var retryAt <-chan time.Time
	if next := w.unable.nextRetry(time.Now()); !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		retryAt = t.C
	}
	select {
	case <-ctx.Done():
	case <-wake:
	case <-retryAt:
	}
}

// claim leases the next shard: of any run of the pool but those this
// worker cannot execute, or of opts.Run only.
func (w *Worker) claim(ctx context.Context, id string) (jobs.Run, jobs.Shard, error) {
	if w.opts.Run == "" {
		return w.led.ClaimNext(ctx, ledger.ClaimNextParams{Pool: w.opts.Pool, Worker: id, Lease: w.opts.Lease, Skip: w.unable.skipping(time.Now())})
	}
	sh, err := w.led.Claim(ctx, w.opts.Run, id, w.opts.Lease)
	if err != nil {
		return jobs.Run{}, sh, err
	}
	run, err := w.led.Run(ctx, w.opts.Run)
	if err != nil {
		_ = w.led.Release(context.WithoutCancel(ctx), ledger.ReleaseParams{RunID: w.opts.Run, Shard: sh.Index, Worker: id})
	}
	return run, sh, err
}

// cannotExecute handles a run this worker cannot make ready (its spec,
// model or sinks do not load here: a variable not set, a model file
// missing or different): the shard goes back without spending an attempt,
// and the worker passes over the run for a backoff and reports why
// (`precog workers`, the run's status, /readyz), so that workers that can
// run it finish it, and a run no worker can run shows why it waits.
//
// A holder whose lease was taken over or whose run ended meanwhile (a worker
// frozen while it prepared the run's sinks, thawed after the run finished)
// is a stale attempt, not a worker that cannot run the job: it stops as any
// stale attempt does and is not marked.
func (w *Worker) cannotExecute(ctx context.Context, id string, run jobs.Run, sh jobs.Shard, err error) {
	rerr := w.led.Release(ctx, ledger.ReleaseParams{RunID: run.ID, Shard: sh.Index, Worker: id})
	if errors.Is(rerr, ledger.ErrLeaseLost) || errors.Is(rerr, ledger.ErrRunFinished) {
		w.log.Info("shard attempt stopped: lease lost or run finished", "run", run.ID, "shard", sh.Index, "worker", id, "err", err)
		return
	}
	if rerr != nil {
		w.log.Warn("release the shard", "run", run.ID, "shard", sh.Index, "worker", id, "err", rerr)
	}
	wait := w.unable.mark(run, err, time.Now())
	w.log.Error("cannot execute this run here; its shard goes back to other workers", "run", run.ID, "job", run.Job, "shard", sh.Index,
		"worker", id, "err", err, "passed_over_for", wait.Round(time.Second))
	w.pres.changed() // report it now, not at the next heartbeat
}

// publishDue picks up runs whose publisher died (or that nobody published).
func (w *Worker) publishDue(ctx, work context.Context, id string) {
	ids, err := w.led.PublishDue(ctx, w.opts.Pool)
	if err != nil {
		w.log.Warn("list runs due for publish", "err", err)
		return
	}
	for _, runID := range ids {
		w.tryPublish(work, id, runID)
	}
}

// tryPublish runs the publish step of runID if this worker gets its lease
// (the shards are all committed and nobody else publishes).
func (w *Worker) tryPublish(ctx context.Context, id, runID string) {
	if w.unable.wait(runID, time.Now()) > 0 {
		return // another worker publishes it
	}
	run, err := w.led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: runID, Worker: id, Lease: w.opts.PublishLease})
	if err != nil {
		if !errors.Is(err, ledger.ErrNoShard) && !errors.Is(err, ledger.ErrRunFinished) {
			w.log.Warn("claim publish", "run", runID, "err", err)
		}
		return
	}
	or, err := w.runs.open(ctx, run, w.opts.Devices[0])
	defer w.runs.release(or)
	if err != nil {
		w.unable.mark(run, err, time.Now())
		w.log.Error("cannot publish run", "run", runID, "worker", id, "err", err)
		return // the publish lease lapses; another worker takes it over
	}
	w.log.Info("publishing", "run", runID, "worker", id)
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(w.opts.PublishLease / 3)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				if err := w.led.HeartbeatPublish(pctx, ledger.PublishLeaseParams{RunID: runID, Worker: id, Lease: w.opts.PublishLease}); err != nil && pctx.Err() == nil {
					cancel(fmt.Errorf("publish lease: %w", err))
					return
				}
			}
		}
	}()
	state, msg := publishStep(pctx, &publisher{led: w.led, snks: or.snks, info: or.info, spec: or.job.Spec, log: w.log,
		lease: &publishLease{led: w.led, worker: id, d: w.opts.PublishLease}})
	if state == "" {
		return // shards went back to be recomputed; their last commit publishes again
	}
	if err := w.led.FinishPublish(context.WithoutCancel(ctx), ledger.FinishPublishParams{RunID: runID, Worker: id, State: state, Msg: msg}); err != nil {
		w.log.Warn("finish publish", "run", runID, "err", err)
		return
	}
	runFinished(or.info.Job, state)
	w.log.Info("run finished", "run", runID, "state", state, "error", msg)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
