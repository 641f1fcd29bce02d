package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner"
)

// runMode is one way to run a job from the command line: `precog run` on
// the embedded ledger, or `precog run --db` on the Postgres ledger (the
// executor's cluster mode: this process works on the run as a worker
// would). The same spec must give the same outcome and exit code on both.
type runMode struct {
	name string
	// db: the mode's ledger is Postgres (--db), not the state dir's.
	db bool
}

var runModes = []runMode{{"run", false}, {"run --db", true}}

// modeLedger is what the cases read of either ledger.
type modeLedger interface {
	Runs(ctx context.Context, job string, limit int) ([]jobs.Run, error)
	Run(ctx context.Context, id string) (jobs.Run, error)
	Shards(ctx context.Context, id string) ([]jobs.Shard, error)
}

// modeEnv is one case in one mode: a work directory (models linked, the
// fixtures' data under data/users), its ledger, and the environment every
// precog process of the case gets.
type modeEnv struct {
	t    *testing.T
	mode runMode
	dir  string
	// dsn is the Postgres ledger's ("" for the embedded ledger).
	dsn string
	env []string
	led modeLedger
}

func newModeEnv(t *testing.T, m runMode) *modeEnv {
	t.Helper()
	e := &modeEnv{t: t, mode: m, dir: t.TempDir()}
	if err := symlink(filepath.Join(fixtures, "models"), filepath.Join(e.dir, "models")); err != nil {
		t.Fatal(err)
	}
	if err := symlink(filepath.Join(fixtures, "data", "users"), filepath.Join(e.dir, "data", "users")); err != nil {
		t.Fatal(err)
	}
	if m.db {
		e.dsn = testservers.Postgres(t).DSN
		e.led = clusterLedger(t, e.dsn)
	} else {
		l, err := bolt.OpenIn(filepath.Join(e.dir, ".precog"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		e.led = l
	}
	e.env = []string{"PRECOG_DATABASE_URL="}
	return e
}

// dbArgs are the mode's arguments of a command on its ledger: --db on the
// Postgres ledger, none on the embedded one.
func (e *modeEnv) dbArgs() []string {
	if e.mode.db {
		return []string{"--db", e.dsn}
	}
	return nil
}

// argv is a precog command line of the case: its state dir, args and its
// ledger.
func (e *modeEnv) argv(args ...string) []string {
	return append(append([]string{"--state-dir", filepath.Join(e.dir, ".precog")}, args...), e.dbArgs()...)
}

// precog runs a command of the case to its end.
func (e *modeEnv) precog(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, e.argv(args...)...)
	cmd.Dir, cmd.Env = e.dir, append(os.Environ(), e.env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("precog %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// start starts a command of the case (with extra environment) and returns
// it running; it is killed at the end of the test.
func (e *modeEnv) start(extraEnv []string, args ...string) *workerProc {
	e.t.Helper()
	cmd := exec.Command(precogBin, e.argv(append([]string{"--log-level", "debug"}, args...)...)...)
	cmd.Dir, cmd.Env = e.dir, append(append(os.Environ(), e.env...), extraEnv...)
	p := &workerProc{name: strings.Join(args[:1], " "), cmd: cmd, log: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			e.t.Logf("%s log:\n%s", p.name, p.log.String())
		}
	})
	return p
}

// waitFor polls cond every 20ms until it holds, within a bound.
func (e *modeEnv) waitFor(what string, within time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: timed out after %s waiting for %s", e.mode.name, within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onlyRun is the job's one run in the ledger (the case fails when there
// is none or several).
func (e *modeEnv) onlyRun(job string) jobs.Run {
	e.t.Helper()
	runs, err := e.led.Runs(context.Background(), job, 0)
	if err != nil || len(runs) != 1 {
		e.t.Fatalf("runs of %s: %d (%v), want 1", job, len(runs), err)
	}
	return runs[0]
}

// waitRunCreated waits for the job's run to be in the ledger.
func (e *modeEnv) waitRunCreated(job string, p *workerProc) jobs.Run {
	e.t.Helper()
	var runs []jobs.Run
	e.waitFor("the run to be created", 2*time.Minute, func() bool {
		if p.exited() {
			e.t.Fatalf("%s ended before its run was created:\n%s", p.name, p.log.String())
		}
		runs, _ = e.led.Runs(context.Background(), job, 0)
		return len(runs) > 0
	})
	return runs[0]
}

// shards reads the run's shards, failing the case on an error.
func (e *modeEnv) shards(id string) []jobs.Shard {
	e.t.Helper()
	s, err := e.led.Shards(context.Background(), id)
	if err != nil {
		e.t.Fatalf("shards of %s: %v", id, err)
	}
	return s
}

// countCommitted counts the committed shards among shards.
func countCommitted(shards []jobs.Shard) int {
	n := 0
	for _, s := range shards {
		if s.State == jobs.ShardCommitted {
			n++
		}
	}
	return n
}

// procExit waits for p to end (within a bound) and returns its exit code.
func procExit(t *testing.T, p *workerProc, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s still running after %s:\n%s", p.name, within, p.log.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

// leftFiles lists the files under dir/out, lock files aside: a run that
// published nothing and cleaned its staging leaves none.
func leftFiles(dir string) []string {
	var left []string
	_ = filepath.WalkDir(filepath.Join(dir, "out"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".precog.lock") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

// checkScores fails the case unless dir holds exactly the ranker's
// reference scores of usersData's first date.
func checkScores(t *testing.T, dir string) {
	t.Helper()
	got, want := readScores(t, dir), expectedScores(t, usersData, 0)
	if len(got) != len(want) {
		t.Fatalf("published %d keys, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(float64(g-w)) > 1e-4 {
			t.Fatalf("key %s: got %v (present %v), want %v", k, g, ok, w)
		}
	}
}

// smallShards is the ranker over usersData's first date in shards of at
// most 200 rows (24 shards: 167 rows) into Parquet, plus extra lines.
func smallShards(extra string) string {
	return strings.Replace(rankerSpec, "rows_per_shard: 1000", "rows_per_shard: 200", 1) + extra
}

// redisSinkLine is the spec line of a Redis sink on rd (namespace ns), with
// the environment it reads.
func redisSinkLine(rd *testservers.RedisServer, ns string) (line string, env []string) {
	return "  redis: { addr: \"${TEST_REDIS_ADDR}\", db: \"${TEST_REDIS_DB}\", namespace: \"${TEST_NS}\" }\n",
		[]string{"TEST_REDIS_ADDR=" + rd.Addr, "TEST_REDIS_DB=" + strconv.Itoa(rd.DB), "TEST_NS=" + ns}
}

// TestRunSemanticsOnBothModes: one table of run semantics, each case on
// `precog run` and on `precog run --db`, with the same assertions: the
// reference output, the rejects budget within and over
// max_rejected_fraction, transient sink errors, checks that hold and that
// fail a run, a cancel mid-run, kill -9 then resume, and a failed run that
// precog retry resumes. Every wait is on
// an event (an exit, a ledger state, a commit count, a process stopping
// itself at a fault point); every loop is bounded.
func TestRunSemanticsOnBothModes(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *modeEnv)
	}{
		{"reference output", datasetCase(testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000}, 0,
			func(t *testing.T, e *modeEnv, r result) {
				if !strings.Contains(r.stdout+r.stderr, "4000 in, 4000 out, 0 rejected") {
					t.Errorf("summary lacks the counts:\n%s%s", r.stdout, r.stderr)
				}
				// The summary is the command's result: stdout on both modes.
				if !strings.Contains(r.stdout, "succeeded (version") || strings.Contains(r.stderr, "succeeded (version") {
					t.Errorf("the summary is not on stdout alone:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
				}
				if got := readScores(t, filepath.Join(e.dir, "out")); len(got) != 4000 {
					t.Errorf("published %d keys, want 4000", len(got))
				}
			})},
		{"rejects within the budget", datasetCase(testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000, BadFraction: 0.004}, 0,
			func(t *testing.T, e *modeEnv, r result) {
				if !strings.Contains(r.stdout+r.stderr, " rejected") || strings.Contains(r.stdout+r.stderr, " 0 rejected") {
					t.Errorf("summary lacks the rejected rows:\n%s%s", r.stdout, r.stderr)
				}
			})},
		{"rejects over the budget", datasetCase(testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000, BadFraction: 0.2}, 1,
			func(t *testing.T, e *modeEnv, r result) {
				if !strings.Contains(r.stderr, "too many rejected rows") {
					t.Errorf("stderr does not say why:\n%s", r.stderr)
				}
				if _, err := os.Stat(filepath.Join(e.dir, "out")); !os.IsNotExist(err) {
					t.Errorf("a failed run published output: %v", err)
				}
			})},
		{"transient sink errors", transientSinkErrors},
		{"checks hold", checksHold},
		{"checks fail", checksFail},
		{"cancel mid-run", cancelMidRun},
		{"kill -9 and resume", killAndResume},
		{"retry after a failure", retryAfterFailure},
	}
	for _, c := range cases {
		for _, m := range runModes {
			t.Run(c.name+"/"+m.name, func(t *testing.T) { c.run(t, newModeEnv(t, m)) })
		}
	}
}

// datasetCase runs the ranker over a generated dataset in one 1000-row
// shard per file and checks the exit code and what check says.
func datasetCase(data testgen.Dataset, code int, check func(t *testing.T, e *modeEnv, r result)) func(t *testing.T, e *modeEnv) {
	return func(t *testing.T, e *modeEnv) {
		res, err := testgen.WriteDataset(filepath.Join(e.dir, "data", "case"), data)
		if err != nil {
			t.Fatal(err)
		}
		if data.BadFraction > 0 && res.BadRows == 0 {
			t.Fatal("fixture has no bad rows")
		}
		body := strings.NewReplacer("data/users/dt={{.date}}", "data/case", "out/scores/date={{.date}}", "out").Replace(rankerSpec)
		spec := writeSpec(t, e.dir, "job.yaml", body)
		r := e.precog("run", spec, "--no-progress")
		if r.code != code {
			t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
		}
		check(t, e, r)
	}
}

// sinkDownAfterFirstCommit starts the ranker over 24 shards into Parquet
// and the Postgres it returns (the spec's extra lines appended), one shard
// at a time; the run stops itself after its first commit, the server is
// stopped, and the run goes on without it.
func sinkDownAfterFirstCommit(t *testing.T, e *modeEnv, extra string) (*testservers.PGServer, *workerProc) {
	pg := testservers.NewPostgres(t)
	e.env = append(e.env, "TEST_DATABASE_URL="+pg.DSN)
	spec := writeSpec(t, e.dir, "job.yaml", smallShards("  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: scores }\n"+extra))
	p := e.start([]string{runner.EnvStopAfterCommits + "=1"}, "run", spec, "--param", "date=2026-11-01", "--parallel", "1", "--no-progress")
	e.waitFor("the run to stop itself after its first commit", 2*time.Minute, func() bool {
		if p.exited() {
			t.Fatalf("the run ended before its first commit:\n%s", p.log.String())
		}
		return processStopped(p.cmd.Process.Pid)
	})
	pg.Stop(t)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return pg, p
}

// transientSinkErrors: the sink's Postgres goes down in the middle of a
// run whose spec allows one attempt per shard (the run stops itself after
// its first commit, the server is stopped, the run goes on) and comes back
// once the run logged a transient error. The transient errors are retried
// within retry.transient_window without spending that attempt, on both
// modes (before the one executor, run --db spent an attempt per transient
// failure and failed the run), and the output is whole.
func transientSinkErrors(t *testing.T, e *modeEnv) {
	pg, p := sinkDownAfterFirstCommit(t, e, "retry: { max_attempts: 1 }\n")
	e.waitFor("a transient error of the sink", 2*time.Minute, func() bool {
		if p.exited() {
			t.Fatalf("the run ended while its sink was down:\n%s", p.log.String())
		}
		return strings.Contains(p.log.String(), "transient error")
	})
	pg.Start(t)
	if code := procExit(t, p, 2*time.Minute); code != 0 {
		t.Fatalf("the run did not ride out the restart: exit %d\n%s", code, p.log.String())
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	want := expectedScores(t, usersData, 0)
	var n, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT user_id) FROM scores").Scan(&n, &distinct); err != nil || n != len(want) || distinct != n {
		t.Errorf("postgres: %d rows, %d keys (%v), want %d", n, distinct, err, len(want))
	}
	for _, s := range e.shards(e.onlyRun("scores").ID) {
		if s.Attempts != 1 {
			t.Errorf("shard %d: %d attempts, want 1 (a transient error spends none)", s.Index, s.Attempts)
		}
	}
}

// failingCheck is a checks block no ranker output passes (scores lie in
// [0, 1]), with on_failure as given ("" for the default, hold).
func failingCheck(onFailure string) string {
	s := "checks:\n  outputs:\n    score: { range: [2, 3] }\n"
	if onFailure != "" {
		s += "  on_failure: " + onFailure + "\n"
	}
	return s
}

// checksHold: a run whose output check fails is held (exit 1, the ledger
// says held, nothing published, its staged data kept); publish --accept
// then publishes exactly the run's output and the run succeeds.
func checksHold(t *testing.T, e *modeEnv) {
	spec := writeSpec(t, e.dir, "job.yaml", smallShards(failingCheck("")))
	r := e.precog("run", spec, "--param", "date=2026-11-01", "--no-progress")
	if r.code != 1 || !strings.Contains(r.stderr, "outputs.score.range") {
		t.Fatalf("run: exit %d, want 1 naming the held run and its failed check\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	run := e.onlyRun("scores")
	if run.State != jobs.RunHeld {
		t.Fatalf("run %s is %s, want held", run.ID, run.State)
	}
	// Both say it alike (run --db said "run … held: run … held by its
	// checks").
	if want := "error: run " + run.ID + " held by its checks: outputs.score.range"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
	}
	target := filepath.Join(e.dir, "out", "scores", "date=2026-11-01")
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("a held run published %s (%v)", target, err)
	}
	p := e.precog("publish", run.ID, "--accept", "--reason", "test accepts it", "--by", "alice")
	if p.code != 0 {
		t.Fatalf("publish --accept: exit %d\nstdout: %s\nstderr: %s", p.code, p.stdout, p.stderr)
	}
	if run, _ = e.led.Run(context.Background(), run.ID); run.State != jobs.RunSucceeded {
		t.Fatalf("run %s is %s after publish --accept, want succeeded", run.ID, run.State)
	}
	checkScores(t, target)
}

// checksFail: with on_failure: fail, a run whose output check fails fails
// (exit 1, the ledger says failed) and leaves nothing in its sink, staged
// or published.
func checksFail(t *testing.T, e *modeEnv) {
	spec := writeSpec(t, e.dir, "job.yaml", smallShards(failingCheck("fail")))
	r := e.precog("run", spec, "--param", "date=2026-11-01", "--no-progress")
	if r.code != 1 || !strings.Contains(r.stderr, "outputs.score.range") {
		t.Fatalf("run: exit %d, want 1 naming the failed check\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if run := e.onlyRun("scores"); run.State != jobs.RunFailed {
		t.Fatalf("run %s is %s, want failed", run.ID, run.State)
	}
	if left := leftFiles(e.dir); len(left) > 0 {
		t.Fatalf("a run failed by its checks left files: %v", left)
	}
}

// cancelMidRun: a slow run (the heavy model in 40 shards of 100 rows, one
// row per batch, two shards at a time) into Parquet and Redis is cancelled
// once it committed a shard: precog cancel marks it cancelled and cleans
// its sinks, the run stops its shards and exits 1 saying it was
// cancelled, no shard is left running or pending, and no file or key of
// the run is left in either sink. (A run frozen at a fault point would do
// for the Postgres ledger, but a process frozen inside a transaction of
// the embedded ledger holds its file lock, which no cancel can take.)
func cancelMidRun(t *testing.T, e *modeEnv) {
	rd := testservers.Redis(t)
	ns := rd.Prefix + "scores"
	line, env := redisSinkLine(rd, ns)
	e.env = append(e.env, env...)
	body := strings.NewReplacer("models/ranker.onnx", "models/heavy.onnx", "rows_per_shard: 1000", "rows_per_shard: 100",
		"batch_size: 256", "batch_size: 1").Replace(rankerSpec) + line
	spec := writeSpec(t, e.dir, "job.yaml", body)
	p := e.start(nil, "run", spec, "--param", "date=2026-11-01", "--parallel", "2", "--no-progress")
	run := e.waitRunCreated("scores", p)
	e.waitFor("a committed shard", 2*time.Minute, func() bool {
		if p.exited() {
			t.Fatalf("the run ended before its first commit:\n%s", p.log.String())
		}
		return countCommitted(e.shards(run.ID)) >= 1
	})
	c := e.precog("cancel", run.ID)
	if c.code != 0 || !strings.Contains(c.stdout, "cancelled") {
		t.Fatalf("cancel after %d of %d shards: exit %d\nstdout: %s\nstderr: %s", countCommitted(e.shards(run.ID)), run.Shards, c.code, c.stdout, c.stderr)
	}
	if code := procExit(t, p, time.Minute); code != 1 {
		t.Fatalf("the cancelled run exited %d, want 1:\n%s", code, p.log.String())
	}
	// Both say why the run ended (run said how the attempt that found out
	// stopped: "shard 9: shard 9: lease check before commit: … the run is
	// cancelled: run finished (shard lease lost)").
	if want := "error: run " + run.ID + " cancelled: cancelled by precog cancel"; !strings.Contains(p.log.String(), want) {
		t.Errorf("the cancelled run does not say %q:\n%s", want, p.log.String())
	}
	if r, err := e.led.Run(context.Background(), run.ID); err != nil || r.State != jobs.RunCancelled {
		t.Fatalf("run %s is %s (%v), want cancelled", run.ID, r.State, err)
	}
	n := 0
	for _, s := range e.shards(run.ID) {
		if s.State == jobs.ShardRunning || s.State == jobs.ShardPending {
			t.Errorf("shard %d is %s after the cancel", s.Index, s.State)
		}
		if s.State == jobs.ShardCommitted {
			n++
		}
	}
	t.Logf("cancelled with %d of %d shards committed", n, run.Shards)
	if left := leftFiles(e.dir); len(left) > 0 {
		t.Errorf("parquet: files left after the cancel: %v", left)
	}
	ctx := context.Background()
	var keys []string
	iter := rd.Client(t).Scan(ctx, 0, ns+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); k != ns+":lock" {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		t.Errorf("redis: %d keys of the cancelled run left, e.g. %v", len(keys), keys[:min(3, len(keys))])
	}
}

// killAndResume: a run into Parquet and Redis stops itself (a fault point)
// right after its 23rd of 24 shard commits and is killed (SIGKILL) there:
// the same command then resumes the same run and commits exactly the one
// shard left, leaving the 19 committed shards as they were, and publishes
// the exact output.
func killAndResume(t *testing.T, e *modeEnv) {
	rd := testservers.Redis(t)
	line, env := redisSinkLine(rd, rd.Prefix+"scores")
	e.env = append(e.env, env...)
	spec := writeSpec(t, e.dir, "job.yaml", smallShards(line))
	args := []string{"run", spec, "--param", "date=2026-11-01", "--parallel", "1", "--no-progress"}
	const done = 23
	p := e.start([]string{runner.EnvStopAfterCommits + "=" + strconv.Itoa(done)}, args...)
	run := e.waitRunCreated("scores", p)
	if run.Shards != done+1 {
		t.Fatalf("the run has %d shards, want %d", run.Shards, done+1)
	}
	e.waitFor(fmt.Sprintf("the run to stop itself after commit %d", done), 2*time.Minute, func() bool {
		if p.exited() {
			t.Fatalf("the run ended before commit %d:\n%s", done, p.log.String())
		}
		return processStopped(p.cmd.Process.Pid)
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	before := e.shards(run.ID)
	if n := countCommitted(before); n != done {
		t.Fatalf("killed with %d shards committed, want %d", n, done)
	}

	resumed := e.start(nil, args...)
	if code := procExit(t, resumed, 2*time.Minute); code != 0 {
		t.Fatalf("resume: exit %d:\n%s", code, resumed.log.String())
	}
	if n := strings.Count(resumed.log.String(), `msg="shard committed"`); n != run.Shards-done {
		t.Errorf("the resume committed %d shards, want the %d left", n, run.Shards-done)
	}
	if got := e.onlyRun("scores"); got.ID != run.ID || got.State != jobs.RunSucceeded {
		t.Fatalf("after the resume: run %s %s, want run %s succeeded", got.ID, got.State, run.ID)
	}
	after := map[int]jobs.Shard{}
	for _, s := range e.shards(run.ID) {
		after[s.Index] = s
	}
	for _, s := range before {
		if s.State != jobs.ShardCommitted {
			continue
		}
		if a := after[s.Index]; a.State != jobs.ShardCommitted || a.Attempts != s.Attempts || a.Worker != s.Worker || !a.UpdatedAt.Equal(s.UpdatedAt) {
			t.Errorf("shard %d, committed before the kill, changed: %+v, was %+v", s.Index, a, s)
		}
	}
	checkScores(t, filepath.Join(e.dir, "out", "scores", "date=2026-11-01"))
}

// retryAfterFailure: a run into Parquet and Postgres whose spec allows
// one attempt per shard and no retries of transient errors
// (retry.transient_window: 0) loses its Postgres server after its first
// commit (it stops itself there, the server is stopped, the run goes on):
// its next shard fails for good, and it exits 1 having published nothing.
// With the server back, `precog retry RUN` on the same ledger takes the
// same run up (on the Postgres ledger a worker of the pool executes it
// while retry --wait follows it): it succeeds with the exact output in
// both sinks, and every shard it committed took one attempt (the failed
// shards' spent attempts were reset, not refused as out of attempts). On
// both modes the shard committed before the failure is not executed again
// (same worker, same time): `precog run` leaves a run whose shards ran out
// of attempts open; `precog run --db` fails it but keeps its staged sink
// data for retry.keep_failed (precog status says until when), and the
// retry takes that data back up.
func retryAfterFailure(t *testing.T, e *modeEnv) {
	pg, p := sinkDownAfterFirstCommit(t, e, "retry: { max_attempts: 1, transient_window: 0s }\n")
	if code := procExit(t, p, 2*time.Minute); code != 1 {
		t.Fatalf("the run without its sink exited %d, want 1:\n%s", code, p.log.String())
	}
	run := e.onlyRun("scores")
	before := e.shards(run.ID)
	if n := countCommitted(before); n != 1 || run.State == jobs.RunSucceeded {
		t.Fatalf("the failed run is %s with %d committed shards, want 1 committed before the sink went down:\n%s", run.State, n, p.log.String())
	}
	target := filepath.Join(e.dir, "out", "scores", "date=2026-11-01")
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the failed run published %s (%v)", target, err)
	}
	pg.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var published bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('scores') IS NOT NULL").Scan(&published); err != nil || published {
		t.Fatalf("the failed run published the Postgres table scores (%v)", err)
	}

	if e.mode.db {
		st := e.precog("status", run.ID)
		if want := "staged data kept until "; st.code != 0 || !strings.Contains(st.stdout, want) || !strings.Contains(st.stdout, "precog retry "+run.ID+" resumes") {
			t.Errorf("status of the failed run: exit %d, want a line %q…:\n%s%s", st.code, want, st.stdout, st.stderr)
		}
		e.start(nil, "worker")
	}
	r := e.precog("retry", run.ID, "--wait", "--parallel", "1", "--no-progress")
	if r.code != 0 {
		t.Fatalf("retry: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if got := e.onlyRun("scores"); got.ID != run.ID || got.State != jobs.RunSucceeded {
		t.Fatalf("after the retry: run %s %s, want run %s succeeded", got.ID, got.State, run.ID)
	}
	after := map[int]jobs.Shard{}
	for _, s := range e.shards(run.ID) {
		after[s.Index] = s
		if s.State != jobs.ShardCommitted || s.Attempts != 1 {
			t.Errorf("shard %d after the retry: %s after %d attempts, want committed after 1", s.Index, s.State, s.Attempts)
		}
	}
	for _, s := range before {
		if a := after[s.Index]; s.State == jobs.ShardCommitted && (a.Worker != s.Worker || !a.UpdatedAt.Equal(s.UpdatedAt)) {
			t.Errorf("shard %d, committed before the failure, was executed again (worker %s at %s, was %s at %s)", s.Index, a.Worker, a.UpdatedAt, s.Worker, s.UpdatedAt)
		}
	}
	checkScores(t, target)
	want := expectedScores(t, usersData, 0)
	var n, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT user_id) FROM scores").Scan(&n, &distinct); err != nil || n != len(want) || distinct != n {
		t.Errorf("postgres: %d rows, %d keys (%v), want %d", n, distinct, err, len(want))
	}
}
