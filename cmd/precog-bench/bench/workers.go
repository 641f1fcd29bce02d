package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	pgledger "github.com/precog-ml/precog/jobs/ledger/postgres"
	"github.com/precog-ml/precog/runner"
)

// workerProc is one `precog worker` child process.
type workerProc struct {
	cmd *exec.Cmd
	// id is its claim loop's name in leases (host-pid/cpu, the worker's
	// default), so a shard's holder maps back to a process.
	id     string
	log    string
	frozen bool
}

// workerParams are the `precog worker` processes startWorkers starts.
type workerParams struct {
	tag   string
	n     int
	lease time.Duration
	// parallel is --parallel, the shards each holds at once (0: its
	// default, 2 on a CPU).
	parallel int
}

// startWorkers starts p.n `precog worker` processes on the ledger at dsn and
// waits until each logs that it is ready.
func (c *clusterBench) startWorkers(ctx context.Context, p workerParams) ([]*workerProc, error) {
	tag, n, lease := p.tag, p.n, p.lease
	host, _ := os.Hostname()
	var ws []*workerProc
	for i := range n {
		dir := filepath.Join(c.h.cfg.work, "workers", fmt.Sprintf("%s-%d", tag, i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			stopWorkers(ws)
			return nil, fmt.Errorf("worker dir %s: %w", dir, err)
		}
		logPath := filepath.Join(dir, "worker.log")
		f, err := os.Create(logPath)
		if err != nil {
			stopWorkers(ws)
			return nil, fmt.Errorf("worker log %s: %w", logPath, err)
		}
		cmd := exec.CommandContext(ctx, c.h.cfg.bin, "--state-dir", dir, "worker", "--db", c.dsn, "--lease", lease.String(), "--parallel", fmt.Sprint(p.parallel))
		cmd.Stdout, cmd.Stderr, cmd.Env = f, f, os.Environ()
		err = cmd.Start()
		f.Close()
		if err != nil {
			stopWorkers(ws)
			return nil, fmt.Errorf("start %s worker: %w", c.h.cfg.bin, err)
		}
		ws = append(ws, &workerProc{cmd: cmd, id: fmt.Sprintf("%s-%d/cpu", host, cmd.Process.Pid), log: logPath})
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, w := range ws {
		for {
			b, _ := os.ReadFile(w.log)
			if strings.Contains(string(b), "worker ready") {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				stopWorkers(ws)
				return nil, fmt.Errorf("worker %s not ready within 60s:\n%s", w.id, tail(string(b), 2000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return ws, nil
}

// stopWorkers thaws frozen workers, stops every worker with SIGTERM (a
// drain) and kills those still running after 10s.
func stopWorkers(ws []*workerProc) {
	for _, w := range ws {
		if w.frozen {
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range ws {
		done := make(chan struct{})
		go func() { _ = w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = w.cmd.Process.Kill()
			<-done
		}
	}
}

// plannedJob is a job spec with its shard plan, ready to be submitted to
// the ledger as many times as a measurement needs.
type plannedJob struct {
	spec         *jobs.Spec
	modelVersion string
	job          *runner.Job
}

func (pj *plannedJob) Close() error { return pj.job.Close() }

// planJob loads and plans the spec at path as `precog submit` does.
func planJob(ctx context.Context, path string) (*plannedJob, error) {
	spec, err := jobs.Load(path, nil)
	if err != nil {
		return nil, err
	}
	job, err := runner.OpenJob(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("open job %s: %w", path, err)
	}
	return &plannedJob{spec: spec, modelVersion: job.Model.Version(), job: job}, nil
}

// submit creates a new pending run of pj in the ledger and returns its id
// and the time just before CreateRun was called.
func (c *clusterBench) submit(ctx context.Context, pj *plannedJob) (string, time.Time, error) {
	plans, err := pj.job.Source.Plan(ctx, pj.spec.Source.RowsPerShard)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("plan %s: %w", pj.spec.Name, err)
	}
	run, shards := runner.NewRun(pj.spec, runner.NewRunOptions{ModelVersion: pj.modelVersion, Plans: plans})
	t0 := time.Now()
	if err := c.led.CreateRun(ctx, run, shards); err != nil {
		return "", t0, err
	}
	return run.ID, t0, nil
}

// waitRun polls the run's state every poll until it is terminal and
// returns when it was seen so; a run that did not succeed is an error.
func waitRun(ctx context.Context, db *pgxpool.Pool, id string, poll, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		var state, msg string
		err := db.QueryRow(ctx, `SELECT state, error FROM precog_runs WHERE id = $1`, id).Scan(&state, &msg)
		now := time.Now()
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return now, fmt.Errorf("run %s: not in the ledger", id)
		case err != nil:
			return now, fmt.Errorf("run %s: read state: %w", id, err)
		case state == string(jobs.RunSucceeded):
			return now, nil
		case jobs.RunState(state).Terminal():
			return now, fmt.Errorf("run %s ended %s: %s", id, state, msg)
		case now.After(deadline):
			return now, fmt.Errorf("run %s still %s after %s", id, state, timeout)
		}
		select {
		case <-ctx.Done():
			return now, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// runRows is the rows the run's committed shards read.
func runRows(ctx context.Context, db *pgxpool.Pool, id string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT coalesce(sum(rows_in), 0)::bigint FROM precog_run_shards WHERE run_id = $1 AND state = 'committed'`, id).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("run %s: read rows: %w", id, err)
	}
	return n, nil
}

// openLedger opens the Postgres ledger the section submits runs through.
func openLedger(ctx context.Context, dsn string, conns int32) (ledger.Store, error) {
	led, err := open.Open(ctx, open.Location{DSN: dsn}, open.Options{Postgres: pgledger.Options{MaxConns: conns}})
	if err != nil {
		return nil, fmt.Errorf("open the Postgres ledger: %w", err)
	}
	return led, nil
}
