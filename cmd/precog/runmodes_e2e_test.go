package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

// runMode is one way to run a job from the command line: `precog run` on
// the embedded ledger, or `precog run --db` on the Postgres ledger (the
// executor's cluster mode: this process works on the run as a worker
// would). The same spec must give the same outcome and exit code on both.
type runMode struct {
	name string
	// args are the mode's extra arguments of `precog run`.
	args func(t *testing.T) []string
}

var runModes = []runMode{
	{"run", func(*testing.T) []string { return nil }},
	{"run --db", func(t *testing.T) []string { return []string{"--db", testservers.Postgres(t).DSN} }},
}

// TestRunSemanticsOnBothModes: one table of run semantics (the reference
// output, the rejects budget within and over max_rejected_fraction), each
// case on `precog run` and `precog run --db`.
func TestRunSemanticsOnBothModes(t *testing.T) {
	type check func(t *testing.T, dir string, r result)
	cases := []struct {
		name string
		// data writes the case's dataset under dir/data/NAME and returns
		// its rows and bad rows.
		data  testgen.Dataset
		code  int
		check check
	}{
		{"reference output", testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000}, 0,
			func(t *testing.T, dir string, r result) {
				if !strings.Contains(r.stdout+r.stderr, "4000 in, 4000 out, 0 rejected") {
					t.Errorf("summary lacks the counts:\n%s%s", r.stdout, r.stderr)
				}
				if got := readScores(t, filepath.Join(dir, "out")); len(got) != 4000 {
					t.Errorf("published %d keys, want 4000", len(got))
				}
			}},
		{"rejects within the budget", testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000, BadFraction: 0.004}, 0,
			func(t *testing.T, dir string, r result) {
				if !strings.Contains(r.stdout+r.stderr, " rejected") || strings.Contains(r.stdout+r.stderr, " 0 rejected") {
					t.Errorf("summary lacks the rejected rows:\n%s%s", r.stdout, r.stderr)
				}
			}},
		{"rejects over the budget", testgen.Dataset{Seed: 3, StringKeys: true, RowsPerFile: 4000, BadFraction: 0.2}, 1,
			func(t *testing.T, dir string, r result) {
				if !strings.Contains(r.stderr, "too many rejected rows") {
					t.Errorf("stderr does not say why:\n%s", r.stderr)
				}
				if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
					t.Errorf("a failed run published output: %v", err)
				}
			}},
	}
	for _, m := range runModes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				dir := t.TempDir()
				if _, err := testgen.Write(filepath.Join(dir, "models"), "ranker"); err != nil {
					t.Fatal(err)
				}
				res, err := testgen.WriteDataset(filepath.Join(dir, "data"), c.data)
				if err != nil {
					t.Fatal(err)
				}
				if c.data.BadFraction > 0 && res.BadRows == 0 {
					t.Fatal("fixture has no bad rows")
				}
				name := fmt.Sprintf("job-%d", len(c.name))
				body := strings.NewReplacer("data/users/dt={{.date}}", "data", "out/scores/date={{.date}}", "out", "name: scores", "name: "+name).Replace(rankerSpec)
				spec := writeSpec(t, dir, "job.yaml", body)
				r := precog(t, dir, append([]string{"run", spec, "--no-progress"}, m.args(t)...)...)
				if r.code != c.code {
					t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, c.code, r.stdout, r.stderr)
				}
				c.check(t, dir, r)
			})
		}
	}
}

// TestTransientSinkErrorsOnBothModes: the sink's Postgres restarts in the
// middle of a run whose spec allows one attempt per shard. The transient
// errors are retried within retry.transient_window without spending that
// attempt, on `precog run` and on `precog run --db` alike (before the one
// executor, run --db spent an attempt per transient failure and failed the
// run), and the output is whole.
func TestTransientSinkErrorsOnBothModes(t *testing.T) {
	for _, m := range runModes {
		t.Run(m.name, func(t *testing.T) {
			pg := testservers.NewPostgres(t)
			dir := workdir(t)
			body := strings.NewReplacer("rows_per_shard: 1000", "rows_per_shard: 200").Replace(rankerSpec) +
				"  postgres: { dsn: \"${TEST_DATABASE_URL}\", table: scores }\n" +
				"retry: { max_attempts: 1 }\n"
			spec := writeSpec(t, dir, "job.yaml", body)
			env := []string{"TEST_DATABASE_URL=" + pg.DSN}
			cmd, log := frozenRun(t, dir, env, append([]string{"run", spec, "--param", "date=2026-11-01", "--parallel", "1", "--no-progress"}, m.args(t)...)...)
			go func() {
				time.Sleep(300 * time.Millisecond)
				_ = cmd.Process.Signal(syscall.SIGCONT)
			}()
			pg.Restart(t, 1500*time.Millisecond)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run did not ride out the restart: %v\n%s", err, log.String())
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("run still going after 2 minutes\n%s", log.String())
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
			if !strings.Contains(log.String(), "transient error") {
				t.Errorf("the log shows no transient retry; did the restart happen mid-run?\n%s", log.String())
			}
		})
	}
}
