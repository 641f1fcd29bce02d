package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
	pqsink "github.com/precog-ml/precog/sinks/parquet"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// TestGCCommand: two published runs, a killed run whose ledger entry ended
// (failed) with its staging directory left, and an open (killed,
// resumable) run. gc --dry-run lists exactly the killed run's directory
// and removes nothing; gc with the target locked by a writer exits 75
// naming it; gc removes the killed run's directory and keeps the open
// run's, the published one and the user's file.
func TestGCCommand(t *testing.T) {
	ctx := context.Background()
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	date := "--param=date=2026-11-01"
	for range 2 {
		if r := precog(t, dir, "run", spec, date); r.code != 0 {
			t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
		}
	}
	target := filepath.Join(dir, "out", "scores", "date=2026-11-01")
	published, err := pqsink.ReadSuccess(target)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "out/scores/notes.txt", "mine\n")

	// The killed and the open run, as the runner leaves them.
	params := map[string]string{"date": "2026-11-01"}
	led, err := bolt.OpenIn(filepath.Join(dir, ".precog"))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := pqsink.New("scores", jobs.ParquetSinkSpec{Path: "out/scores/date={{.date}}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, v := range []string{"killed1", "open1"} {
		run := sinktest.NewRun(v, false, params)
		run.Job, run.RunID = "scores", "scores-"+v
		if err := led.CreateRun(ctx, jobs.Run{ID: run.RunID, Job: "scores", Version: v, Params: params, ParamsKey: jobs.ParamsKey(params), State: jobs.RunPending},
			[]jobs.Shard{{Index: 0, State: jobs.ShardPending}}); err != nil {
			t.Fatal(err)
		}
		if err := sink.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		w, err := sink.Shard(ctx, run, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := sinktest.Batch(run, 0, 20)
		if err := w.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Release()
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if v == "killed1" {
			if err := led.SetRunState(ctx, run.RunID, jobs.RunFailed, "killed"); err != nil {
				t.Fatal(err)
			}
		}
	}
	led.Close()
	killedDir := filepath.Join(dir, "out", "scores", ".date=2026-11-01.precog-killed1")
	openDir := filepath.Join(dir, "out", "scores", ".date=2026-11-01.precog-open1")

	r := precog(t, dir, "gc", spec, date, "--dry-run")
	if r.code != 0 {
		t.Fatalf("gc --dry-run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	words := strings.Join(strings.Fields(r.stdout), " ")
	for _, want := range []string{
		"parquet killed1 would remove staging dir " + killedDir,
		"parquet open1 kept: open run scores-open1 (pending)",
		"parquet " + published.Version + " kept: current",
		"1 would be removed",
	} {
		if !strings.Contains(words, want) {
			t.Errorf("gc --dry-run output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "notes.txt") || strings.Count(r.stdout, "would remove") != 1 {
		t.Errorf("gc --dry-run lists more than the killed run:\n%s", r.stdout)
	}
	if _, err := os.Stat(killedDir); err != nil {
		t.Fatalf("dry run removed the killed run's staging dir: %v", err)
	}

	// A writer holds the target: gc skips the sink and says who.
	writer := sinks.RunInfo{Job: "scores", RunID: "scores-live", Version: "live1", Params: params}
	l, err := sink.Lock(ctx, writer, sinks.ThisProcess(writer))
	if err != nil {
		t.Fatal(err)
	}
	r = precog(t, dir, "gc", spec, date)
	l.Release(ctx)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "scores-live") || !strings.Contains(r.stdout, "skipped: target locked by run scores-live") {
		t.Fatalf("gc with the target locked: exit %d, want 75 naming scores-live\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(killedDir); err != nil {
		t.Fatalf("gc removed data of a locked target: %v", err)
	}

	r = precog(t, dir, "gc", spec, date, "--json")
	if r.code != 0 {
		t.Fatalf("gc: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep runner.GCReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("gc --json: %v\n%s", err, r.stdout)
	}
	removed := 0
	for _, e := range rep.Entries {
		if e.Action == runner.GCRemoved {
			removed++
			if e.Version != "killed1" || e.RunID != "scores-killed1" || e.RunState != jobs.RunFailed {
				t.Errorf("removed %+v, want only the killed run's", e)
			}
		}
	}
	if removed != 1 || rep.Runs != 4 || rep.OpenRuns != 1 {
		t.Errorf("gc --json: %d removed, %d runs, %d open; want 1, 4, 1:\n%s", removed, rep.Runs, rep.OpenRuns, r.stdout)
	}
	if _, err := os.Stat(killedDir); err == nil {
		t.Error("the killed run's staging dir is still there")
	}
	if _, err := os.Stat(openDir); err != nil {
		t.Errorf("the open run's staging dir: %v", err)
	}
	if got := readScores(t, target); len(got) != 4000 {
		t.Errorf("published dir has %d keys after gc, want 4000", len(got))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "scores", "notes.txt")); err != nil || string(b) != "mine\n" {
		t.Errorf("user's file after gc: %q, %v", b, err)
	}

	// A state dir without a ledger: gc refuses to remove anything.
	if r := precogState(t, dir, "elsewhere", "gc", spec, date); r.code != exitInvalid || !strings.Contains(r.stderr, "no ledger") {
		t.Errorf("gc with a missing ledger: exit %d, want 2\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(openDir); err != nil {
		t.Errorf("the open run's staging dir after gc without a ledger: %v", err)
	}
}

// TestGCUnreachableLedger: gc --db with the ledger unreachable exits 75
// (retry later), as the other cluster commands do, without the URL's
// password.
func TestGCUnreachableLedger(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	r := precog(t, dir, "gc", spec, "--param=date=2026-11-01", "--db", "postgres://u:leak-me@127.0.0.1:1/db?sslmode=disable")
	if r.code != 75 || strings.Contains(r.stderr+r.stdout, "leak-me") || !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("gc with an unreachable ledger: exit %d, want 75 without the password\n%s", r.code, r.stderr)
	}
}
