package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner/backfill"
)

// localBackfillSpec is the 6-date job of backfillData on this machine: the
// heavy model in batches of 1 (each date lasts a while), into a Parquet
// directory and a Redis namespace per date, or (shared) one namespace
// written in place.
func localBackfillSpec(rdb *testservers.RedisServer, ns string) string {
	j := e2eJob{data: "backfill6", model: "heavy", rowsPerShard: 100, batch: 1}
	extra := ""
	if !strings.Contains(ns, "{{.date}}") {
		extra = ", publish: in_place"
	}
	return j.specBody() + fmt.Sprintf("  redis: { addr: %q, db: %d, namespace: %q%s }\n", rdb.Addr, rdb.DB, ns, extra)
}

// readSnapshotFile reads the state dir's ledger snapshot (ok false while
// there is none).
func readSnapshotFile(stateDir string) (backfill.Snapshot, bool) {
	var s ledger.Snapshot
	b, err := os.ReadFile(filepath.Join(stateDir, bolt.SnapshotFile))
	if err != nil || json.Unmarshal(b, &s) != nil {
		return backfill.Snapshot{}, false
	}
	return backfill.ViewSnapshot(stateDir, s), true
}

// inFlight counts the snapshot's runs of backfill b started and not ended.
func inFlight(s backfill.Snapshot, b backfill.View) int {
	n := 0
	for _, d := range b.Dates {
		if d.State == "running" || d.State == "publishing" {
			n++
		}
	}
	return n
}

// TestBackfillLocalParallelVisible: a local backfill of 6 dates with
// --parallel 4 into a Redis namespace per date runs 4 dates at once (read
// from the ledger's snapshot while it runs, never more), and while it runs
// `precog runs --backfill`, `precog status ID` and the dashboard from other
// processes answer from the shared embedded ledger instead of exiting 75. The same job into one namespace written in place is refused at
// --parallel 4 before anything runs.
func TestBackfillLocalParallelVisible(t *testing.T) {
	writeBackfillData(t)
	rdb := testservers.Redis(t)
	dir := workdir(t)
	dates := backfillData.Dates
	state := filepath.Join(dir, ".precog")

	shared := writeSpec(t, dir, "shared.yaml", localBackfillSpec(rdb, rdb.Prefix+"shared"))
	r := precog(t, dir, "backfill", shared, "--from", dates[0], "--to", dates[len(dates)-1], "--parallel", "4")
	if r.code != 2 || !strings.Contains(r.stderr, "--parallel 1") || !strings.Contains(r.stderr, "namespace per date") {
		t.Errorf("in-place shared namespace at --parallel 4: exit %d, want 2 naming the alternatives\n%s", r.code, r.stderr)
	}
	if runs := precog(t, dir, "runs", "--json"); strings.TrimSpace(runs.stdout) != "[]" {
		t.Errorf("the refused backfill left runs: %s%s", runs.stdout, runs.stderr)
	}
	if keys, _ := rdb.Client(t).Keys(context.Background(), rdb.Prefix+"shared*").Result(); len(keys) > 0 {
		t.Errorf("the refused backfill wrote Redis keys: %v", keys[:min(3, len(keys))])
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Errorf("the refused backfill wrote Parquet output")
	}

	spec := writeSpec(t, dir, "job.yaml", localBackfillSpec(rdb, rdb.Prefix+"d-{{.date}}"))
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, "--state-dir", state, "backfill", spec, "--from", dates[0], "--to", dates[len(dates)-1],
		"--parallel", "4", "--shard-parallel", "1", "--no-progress")
	cmd.Dir = dir
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		if ctx.Err() == nil {
			cancel()
		}
	}()

	// Sample the snapshot until 4 dates run at once; every sample holds at
	// most 4. Bounded by the command's own timeout.
	deadline := time.Now().Add(2 * time.Minute)
	most, samples := 0, 0
	var snap backfill.Snapshot
	for most < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot with 4 dates in flight within 2m (most %d in %d samples)\nstdout %s\nstderr %s", most, samples, out.String(), errb.String())
		}
		select {
		case err := <-done:
			t.Fatalf("backfill ended (%v) before a snapshot showed 4 dates in flight (most %d in %d samples)\n%s", err, most, samples, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		s, ok := readSnapshotFile(state)
		if !ok || len(s.Backfills) != 1 {
			continue
		}
		snap = s
		samples++
		n := inFlight(s, s.Backfills[0])
		if n > 4 {
			t.Errorf("snapshot at %s: %d dates in flight, --parallel 4", s.WrittenAt, n)
		}
		most = max(most, n)
	}
	id := snap.Backfills[0].ID

	// The backfill holds no ledger file between its transactions: the
	// commands below answer from the shared ledger while it runs. (A
	// process frozen inside a transaction would hold everyone for
	// bolt.LockWait, then readers fall back to its snapshot.)
	runs := precog(t, dir, "runs", "--backfill", id, "--json")
	var list []runview.Run
	if runs.code != 0 || json.Unmarshal([]byte(runs.stdout), &list) != nil || len(list) != len(dates) {
		t.Errorf("runs --backfill %s --json while it runs: exit %d, want %d runs\n%s%s", id, runs.code, len(dates), runs.stdout, runs.stderr)
	}
	st := precog(t, dir, "status", id, "--json")
	var view backfill.View
	if st.code != 0 || json.Unmarshal([]byte(st.stdout), &view) != nil || view.ID != id || len(view.Dates) != len(dates) || view.State != "running" {
		t.Errorf("status %s --json while it runs: exit %d\n%s%s", id, st.code, st.stdout, st.stderr)
	}
	one := precog(t, dir, "status", list[0].ID)
	if one.code != 0 || !strings.Contains(one.stdout, list[0].ID) {
		t.Errorf("status RUN while it runs: exit %d\n%s%s", one.code, one.stdout, one.stderr)
	}
	// The dashboard over the same state dir lists the backfill's runs.
	dashAddr := freeAddr(t)
	startPrecogCollecting(t, dir, "dashboard", "--addr", dashAddr, "--insecure-no-auth")
	var page string
	waitForSecretsTest(t, 30*time.Second, "the dashboard's runs page", func() bool {
		resp, err := http.Get("http://" + dashAddr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(page, "data-snapshot")) &&
			len(list) > 0 && strings.Contains(page, `data-run="`+list[0].ID+`"`)
	})

	// Sample on until the backfill ends: never more than 4 at once.
	for ended := false; !ended; {
		select {
		case err := <-done:
			ended = true
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatalf("backfill: %v\n%s", err, errb.String())
			}
		case <-time.After(20 * time.Millisecond):
		}
		if s, ok := readSnapshotFile(state); ok && len(s.Backfills) == 1 {
			if n := inFlight(s, s.Backfills[0]); n > 4 {
				t.Errorf("snapshot at %s: %d dates in flight, --parallel 4", s.WrittenAt, n)
			}
		}
	}
	t.Logf("4 dates in flight at once after %d snapshot samples", samples)
	if got := strings.TrimSpace(out.String()); got != id {
		t.Errorf("backfill printed %q, the snapshot names %s", got, id)
	}
	// Done, the ledger is free again: the last snapshot says succeeded and
	// the ledger agrees.
	if s, _ := readSnapshotFile(state); len(s.Backfills) != 1 || s.Backfills[0].State != "succeeded" {
		t.Errorf("the last snapshot: %+v", s.Backfills)
	}
	after := precog(t, dir, "status", id, "--json")
	if after.code != 0 || !strings.Contains(after.stdout, `"state":"succeeded"`) || strings.Contains(after.stderr, "snapshot") {
		t.Errorf("status %s after: exit %d\n%s%s", id, after.code, after.stdout, after.stderr)
	}
	for _, d := range dates {
		if n, err := rdb.Client(t).Exists(context.Background(), rdb.Prefix+"d-"+d+":current").Result(); err != nil || n != 1 {
			t.Errorf("redis namespace of %s has no current version (%v)", d, err)
		}
	}
}
