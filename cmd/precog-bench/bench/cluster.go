package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs/ledger"
)

// Cluster section shape (issue 7).
const (
	// capacityWorkers is the concurrent workers of the ledger-capacity loop.
	capacityWorkers = 32
	// capacityShardsPerRun × capacityRuns shards last the capacity loop
	// 3 s at up to 8,000 shards/s; running out ends it early.
	capacityShardsPerRun = 6_000
	// shardSeconds is the shard length the workers-per-Postgres note assumes.
	shardSeconds = 10
	// pickupRuns is how many submissions the pick-up latency is taken over.
	pickupRuns = 50
	// stragglerWorkers run the straggler measurement; one is frozen.
	stragglerWorkers = 3
	// stragglerLease is the workers' shard lease there (--lease).
	stragglerLease = 2 * time.Second
	// stragglerShardRows makes the heavy run several shards per worker.
	stragglerShardRows = 50_000
	// runTimeout bounds one cluster run of the section.
	runTimeout = 5 * time.Minute
)

// clusterBench is the cluster section's state: its own database on the
// harness's Postgres, a ledger to submit through and a pool to poll with.
type clusterBench struct {
	h   *harness
	dsn string
	led ledger.Store
	db  *pgxpool.Pool
}

// cluster is issue 7's section: `precog worker` against `precog run`,
// ledger capacity against raw Postgres round trips, pick-up latency against
// a raw LISTEN/NOTIFY, and a frozen worker's cost.
func (h *harness) cluster(ctx context.Context) (*section, error) {
	s := &section{Title: "Cluster: `precog worker` on the Postgres ledger (a private postgres; fsync and synchronous_commit off, as for every server of this harness)"}
	dsn, err := testservers.StartPostgres("precog_bench_cluster")
	if err != nil {
		return s, err
	}
	led, err := openLedger(ctx, dsn, capacityWorkers+4)
	if err != nil {
		return s, err
	}
	defer led.Close()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return s, fmt.Errorf("connect to the benchmark's Postgres: %w", err)
	}
	defer db.Close()
	c := &clusterBench{h: h, dsn: dsn, led: led, db: db}
	load := loadAvg()
	defer func() {
		s.note("load average (1 min) at the section's start / end: %s / %s: the machine is shared.", load, loadAvg())
	}()
	steps := []struct {
		name string
		fn   func(context.Context, *section) error
	}{
		{"overhead", c.overhead},
		{"ledger capacity", c.capacity},
		{"pick-up latency", c.pickup},
		{"straggler", c.straggler},
	}
	for _, st := range steps {
		t0 := time.Now()
		if err := st.fn(ctx, s); err != nil {
			return s, fmt.Errorf("%s: %w", st.name, err)
		}
		slog.Info("cluster step done", "step", st.name, "took", time.Since(t0).Round(time.Millisecond))
	}
	return s, nil
}

// loadAvg is the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// overhead compares one `precog worker` with `precog run` on the heavy job:
// the worker's time runs from `precog submit` starting until the run is
// seen succeeded in the ledger, `precog run`'s is the command's wall time.
// They alternate three times and each keeps its best.
func (c *clusterBench) overhead(ctx context.Context, s *section) error {
	h := c.h
	data, err := h.dataset(h.cfg.heavyRow)
	if err != nil {
		return err
	}
	score := map[string]string{"score": "score"}
	sink := func(name string) string {
		return fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(h.cfg.work, "out", name))
	}
	runSpec, err := h.writeSpec("bench-cluster-run", "heavy", data, score, sink("cluster-run"))
	if err != nil {
		return err
	}
	workerSpec, err := h.writeSpec("bench-cluster-worker", "heavy", data, score, sink("cluster-worker"))
	if err != nil {
		return err
	}
	ws, err := c.startWorkers(ctx, workerParams{tag: "overhead", n: 1, lease: 30 * time.Second})
	if err != nil {
		return err
	}
	defer stopWorkers(ws)
	var bestRun, bestWorker time.Duration
	var walls []string
	for round := range 3 {
		r, err := h.runPrecog(ctx, runSpec, filepath.Join(h.cfg.work, fmt.Sprintf("state-cluster-run-%d", round)), nil)
		if err != nil {
			return err
		}
		if r.RowsIn != h.cfg.heavyRow {
			return fmt.Errorf("precog run read %d rows, want %d", r.RowsIn, h.cfg.heavyRow)
		}
		w, sub, err := c.submitAndWait(ctx, workerSpec, h.cfg.heavyRow)
		if err != nil {
			return err
		}
		slog.Info("cluster overhead", "round", round, "run", r.Wall.Round(time.Millisecond), "worker", w.Round(time.Millisecond), "submit", sub.Round(time.Millisecond))
		walls = append(walls, fmt.Sprintf("%s / %s (submit %s)", dur(r.Wall), dur(w), dur(sub)))
		if bestRun == 0 || r.Wall < bestRun {
			bestRun = r.Wall
		}
		if bestWorker == 0 || w < bestWorker {
			bestWorker = w
		}
	}
	rows := float64(h.cfg.heavyRow)
	s.add(atLeast(fmt.Sprintf("overhead: one `precog worker` (submit → run succeeded, %s) vs `precog run` (wall, %s), heavy model, %d rows, %d shards",
		dur(bestWorker), dur(bestRun), h.cfg.heavyRow, h.cfg.heavyRow/rowsPerFile),
		rows/bestWorker.Seconds(), rows/bestRun.Seconds(), "rows/s", 0.95))
	s.note("overhead: best of 3 alternating measurements each; `precog run` / worker wall times (of which the `precog submit` command: it loads the model and plans, as `precog run` does, before the worker loads it again): %s. Both execute 2 shards at once (their default on a CPU).", strings.Join(walls, ", "))
	return nil
}

// submitAndWait runs `precog submit spec` and follows the run in the ledger
// until it succeeded; it returns the time from starting submit until then
// and the submit command's own time, after checking that the run's
// committed shards read wantRows rows.
func (c *clusterBench) submitAndWait(ctx context.Context, spec string, wantRows int64) (total, submit time.Duration, err error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.h.cfg.bin, "--state-dir", filepath.Join(c.h.cfg.work, "state-submit"), "submit", "--db", c.dsn, spec)
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, os.Environ()
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("precog submit %s: %w\n%s", spec, err, tail(errb.String(), 2000))
	}
	submit = time.Since(t0)
	id := strings.TrimSpace(out.String())
	end, err := waitRun(ctx, c.db, id, 10*time.Millisecond, runTimeout)
	if err != nil {
		return 0, 0, err
	}
	rows, err := runRows(ctx, c.db, id)
	if err != nil {
		return 0, 0, err
	}
	if rows != wantRows {
		return 0, 0, fmt.Errorf("run %s read %d rows, want %d", id, rows, wantRows)
	}
	return end.Sub(t0), submit, nil
}

// capacity is the ledger's claim + heartbeat + complete cycles per second
// with capacityWorkers goroutines, against as many goroutines running a
// single-row UPDATE each (the raw limit); they alternate twice.
func (c *clusterBench) capacity(ctx context.Context, s *section) error {
	d := c.h.cfg.measure
	// A short untimed loop first opens the ledger's connections and warms
	// its statements and tables, as a running cluster's are.
	if _, err := claimCycles(ctx, c.led, "capwarm", capacityWorkers, capacityShardsPerRun/4, d/4); err != nil {
		return err
	}
	var best cycleStats
	var raw float64
	for rep := range 2 {
		st, err := claimCycles(ctx, c.led, fmt.Sprintf("cap%d", rep), capacityWorkers, capacityShardsPerRun, d)
		if err != nil {
			return err
		}
		cy := st.rate
		r, err := rawStatements(ctx, c.dsn, `UPDATE bench_raw SET n = n + 1 WHERE id = $1`, capacityWorkers, d)
		if err != nil {
			return err
		}
		slog.Info("ledger capacity", "rep", rep, "cycles_per_s", int64(cy), "raw_updates_per_s", int64(r))
		if cy > best.rate {
			best = st
		}
		raw = max(raw, r)
	}
	cycles := best.rate
	sel, err := rawStatements(ctx, c.dsn, `SELECT 1`, capacityWorkers, d)
	if err != nil {
		return err
	}
	const target = 5000
	s.add(row{
		What: fmt.Sprintf("ledger capacity: ClaimNext + Heartbeat + Complete cycles/s, %d concurrent workers (goroutines), vs single-row UPDATEs/s from %d goroutines",
			capacityWorkers, capacityWorkers),
		Ours: rate(cycles, "shards/s"), Raw: rate(raw, "stmts/s"), Ratio: fmt.Sprintf("%.2f", cycles/raw),
		Target: fmt.Sprintf("≥ %s", rate(target, "shards/s")), Verdict: verdict(cycles >= target),
	})
	s.note("ledger capacity: best of 2 alternating %s loops (%d shards in the best); a cycle is 3 statements, so a ratio near 0.33 is the ledger at Postgres's single-statement rate. Mean latency of each call under the load: claim %s, heartbeat %s, complete %s. `SELECT 1` from %d goroutines: %s.",
		dur(d), best.n, dur(best.claim), dur(best.heartbeat), dur(best.complete), capacityWorkers, rate(sel, "stmts/s"))
	if raw < 3*target {
		s.note("ledger capacity: a cycle writes 3 times (the claim, the heartbeat and the commit each update the shard's row), so the target needs %s; this machine's Postgres, sharing %d cores with the 32 client goroutines, does %s (raw single-row UPDATEs on a 32-row table): no ledger of 3 writes a cycle reaches the target here. Compare the ratio (0.33 is the raw rate), and re-measure with the database on a host of its own.",
			rate(3*target, "single-row writes/s"), nprocs(), rate(raw, "stmts/s"))
	}
	s.note("**one Postgres coordinates ≈ %s** at %d-s shards (each worker needs one claim + heartbeat + complete per shard: %s × %d s); on this box Postgres shares the %d cores with the load loop.",
		rate(cycles*shardSeconds, "workers"), shardSeconds, rate(cycles, "shards/s"), shardSeconds, nprocs())
	return nil
}

// pickup submits pickupRuns one-shard runs to an idle `precog worker` and
// takes each one's pick-up latency: from just before CreateRun to the
// shard's claimed_at (the database's clock, which is this machine's).
// The raw limit is a NOTIFY's latency to an idle LISTEN connection.
func (c *clusterBench) pickup(ctx context.Context, s *section) error {
	h := c.h
	data, err := h.dataset(1000)
	if err != nil {
		return err
	}
	spec, err := h.writeSpec("bench-cluster-pickup", "ranker", data, map[string]string{"score": "score"},
		fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(h.cfg.work, "out", "cluster-pickup")))
	if err != nil {
		return err
	}
	pj, err := planJob(ctx, spec)
	if err != nil {
		return err
	}
	defer pj.Close()
	ws, err := c.startWorkers(ctx, workerParams{tag: "pickup", n: 1, lease: 30 * time.Second, parallel: 1})
	if err != nil {
		return err
	}
	defer stopWorkers(ws)
	var lats []time.Duration
	for i := range pickupRuns + 1 {
		// The worker is back waiting on Wake: its last run finished.
		time.Sleep(20 * time.Millisecond)
		lat, err := c.pickupOnce(ctx, pj)
		if err != nil {
			return err
		}
		if i > 0 { // the first is a warm-up
			lats = append(lats, lat)
		}
	}
	raw, err := notifyLatency(ctx, c.dsn, pickupRuns)
	if err != nil {
		return err
	}
	p50, p99 := quantile(lats, 0.50), quantile(lats, 0.99)
	r50, r99 := quantile(raw, 0.50), quantile(raw, 0.99)
	s.add(row{
		What: fmt.Sprintf("pick-up latency: CreateRun → first claim by an idle `precog worker` waiting on Wake (LISTEN/NOTIFY), %d runs: p50 / p99, vs a raw NOTIFY → LISTEN", len(lats)),
		Ours: fmt.Sprintf("%s / %s", dur(p50), dur(p99)), Raw: fmt.Sprintf("%s / %s", dur(r50), dur(r99)),
		Ratio: fmt.Sprintf("%.1f× (p50)", float64(p50)/float64(r50)), Target: "p50 ≤ 50 ms", Verdict: verdict(p50 <= 50*time.Millisecond),
	})
	s.note("pick-up: each run is submitted once the previous one succeeded (the worker idle on Wake, poll fallback 1 s); the latency includes CreateRun's own transaction (insert, COPY of the shards, NOTIFY, commit). Max %s.", dur(lats[len(lats)-1]))
	return nil
}

// pickupOnce submits one run of pj, waits for its shard to be claimed and
// the run to succeed, and returns the pick-up latency.
func (c *clusterBench) pickupOnce(ctx context.Context, pj *plannedJob) (time.Duration, error) {
	id, t0, err := c.submit(ctx, pj)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(30 * time.Second)
	var claimed *time.Time
	for claimed == nil {
		err := c.db.QueryRow(ctx, `SELECT claimed_at FROM precog_run_shards WHERE run_id = $1 AND idx = 0`, id).Scan(&claimed)
		if err != nil {
			return 0, fmt.Errorf("run %s: read claimed_at: %w", id, err)
		}
		if claimed == nil {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("run %s: shard 0 not claimed within 30s", id)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if _, err := waitRun(ctx, c.db, id, 5*time.Millisecond, runTimeout); err != nil {
		return 0, err
	}
	return claimed.Sub(t0), nil
}

// straggler times the heavy run on stragglerWorkers workers (lease
// stragglerLease) as is and with one worker frozen by SIGSTOP while it
// holds a shard; they alternate twice and each keeps its best.
func (c *clusterBench) straggler(ctx context.Context, s *section) error {
	h := c.h
	data, err := h.dataset(h.cfg.heavyRow)
	if err != nil {
		return err
	}
	// One intra-op thread per worker: freezing a worker then frees no CPU
	// that the others could use (on a small box a frozen worker's threads
	// would otherwise speed the others up), and the recomputed shard runs
	// at one shard's speed.
	spec, err := h.writeSpecWith("bench-cluster-straggler", "heavy", data, map[string]string{"score": "score"},
		fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(h.cfg.work, "out", "cluster-straggler")),
		specOptions{RowsPerShard: stragglerShardRows, Threads: 1})
	if err != nil {
		return err
	}
	pj, err := planJob(ctx, spec)
	if err != nil {
		return err
	}
	defer pj.Close()
	// One shard per worker: the frozen worker holds exactly the one shard.
	ws, err := c.startWorkers(ctx, workerParams{tag: "straggler", n: stragglerWorkers, lease: stragglerLease, parallel: 1})
	if err != nil {
		return err
	}
	defer stopWorkers(ws)
	var base, frozen time.Duration
	var events []string
	for rep := range 2 {
		b, _, err := c.timedRun(ctx, pj, nil)
		if err != nil {
			return err
		}
		var ev string
		f, _, err := c.timedRun(ctx, pj, func(id string) (func(), error) { return c.freezeOne(ctx, ws, id, &ev) })
		if err != nil {
			return err
		}
		slog.Info("cluster straggler", "rep", rep, "base", b.Round(time.Millisecond), "frozen", f.Round(time.Millisecond), "event", ev)
		events = append(events, fmt.Sprintf("%s / %s (%s)", dur(b), dur(f), ev))
		if base == 0 || b < base {
			base = b
		}
		if frozen == 0 || f < frozen {
			frozen = f
		}
	}
	shards := (h.cfg.heavyRow + stragglerShardRows - 1) / stragglerShardRows
	s.add(atMost(fmt.Sprintf("straggler: heavy run (%d rows, %d shards, model.threads 1) on %d workers with one frozen (SIGSTOP) mid-shard, --lease %s, vs the same run with none frozen",
		h.cfg.heavyRow, shards, stragglerWorkers, stragglerLease), dur(frozen), dur(base), frozen.Seconds()/base.Seconds(), 1.5))
	s.note("straggler: best of 2 alternating measurements each, CreateRun → succeeded; without / with the frozen worker: %s. The frozen worker holds the last shard claimed, 300 ms into it, once none is pending: the run cannot end before its lease expires and an idle worker (woken by the 1 s poll, as no notice marks an expiry) recomputes it. One intra-op thread per worker: %d workers on %d cores.",
		strings.Join(events, "; "), stragglerWorkers, nprocs())
	return nil
}

// timedRun submits a run of pj and times it from CreateRun until it is seen
// succeeded. during, when set, is called with the run's id once submitted;
// the func it returns runs after the run succeeded.
func (c *clusterBench) timedRun(ctx context.Context, pj *plannedJob, during func(id string) (func(), error)) (time.Duration, string, error) {
	id, t0, err := c.submit(ctx, pj)
	if err != nil {
		return 0, "", err
	}
	after := func() {}
	if during != nil {
		if after, err = during(id); err != nil {
			return 0, id, err
		}
	}
	end, err := waitRun(ctx, c.db, id, 10*time.Millisecond, runTimeout)
	after()
	if err != nil {
		return 0, id, err
	}
	return end.Sub(t0), id, nil
}

// freezeOne waits until run id has no pending shard left and its last
// claimed shard has been held for 300 ms, then freezes that shard's worker
// with SIGSTOP: the worst case, where the run cannot end before the lease
// expires and another worker recomputes the shard. The func it returns
// thaws the worker (SIGCONT) and describes in *ev what happened.
func (c *clusterBench) freezeOne(ctx context.Context, ws []*workerProc, id string, ev *string) (func(), error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var idx int
		var holder string
		err := c.db.QueryRow(ctx, `SELECT idx, worker FROM precog_run_shards s
			WHERE run_id = $1 AND state = 'running' AND claimed_at < now() - interval '300 milliseconds'
				AND NOT EXISTS (SELECT 1 FROM precog_run_shards p WHERE p.run_id = $1 AND p.state = 'pending')
			ORDER BY claimed_at DESC LIMIT 1`, id).Scan(&idx, &holder)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("run %s: no last shard held for 300 ms within a minute", id)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		case err != nil:
			return nil, fmt.Errorf("run %s: find a running shard: %w", id, err)
		}
		for _, w := range ws {
			if w.id != holder {
				continue
			}
			if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				return nil, fmt.Errorf("SIGSTOP worker %s: %w", w.id, err)
			}
			w.frozen = true
			frozenAt := time.Now()
			return func() {
				var attempts int
				var by string
				_ = c.db.QueryRow(ctx, `SELECT attempts, coalesce(worker, '') FROM precog_run_shards WHERE run_id = $1 AND idx = $2`, id, idx).Scan(&attempts, &by)
				*ev = fmt.Sprintf("shard %d's worker frozen for %s, the shard committed after %d attempts", idx, dur(time.Since(frozenAt)), attempts)
				if by == holder {
					*ev += " by the frozen worker"
				}
				_ = w.cmd.Process.Signal(syscall.SIGCONT)
				w.frozen = false
			}, nil
		}
		return nil, fmt.Errorf("run %s: shard %d is held by %q, none of this section's workers", id, idx, holder)
	}
}
