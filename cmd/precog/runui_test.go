package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunUI: precog run --ui serves the dashboard's pages over the run's
// own ledger while it executes, and stops serving when the run ends.
func TestRunUI(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", strings.NewReplacer("models/ranker.onnx", "models/heavy.onnx", "rows_per_shard: 1000", "rows_per_shard: 200", "batch_size: 256", "batch_size: 8").Replace(rankerSpec))
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, "--state-dir", filepath.Join(dir, ".precog"), "run", spec, "--param", "date=2026-11-01", "--ui", addr, "--no-progress")
	cmd.Dir = dir
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var page string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "scores-") {
				page = string(b)
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) before its page listed it:\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if page == "" {
		t.Fatalf("no runs page with the run on %s\n%s", addr, out.String())
	}
	if !strings.Contains(page, "running") && !strings.Contains(page, "pending") {
		t.Errorf("the page does not show the run as running:\n%.1500s", page)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Errorf("the --ui server still answers after the run ended")
	}
}
