package scheduler

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestLastScheduledRun: the newest run with a scheduled_for param is the
// last scheduled one; a newer manual run does not count; a job with only
// manual runs has none.
func TestLastScheduledRun(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	t0 := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	for i, params := range []map[string]string{
		{"scheduled_for": t0.Format(time.RFC3339)},
		{"scheduled_for": t0.Add(time.Hour).Format(time.RFC3339)},
		{"date": "2026-11-01"}, // manual, newest
	} {
		id := string(rune('a' + i))
		r := jobs.Run{ID: id, Job: "j", Version: "v" + id, Params: params, ParamsKey: jobs.ParamsKey(params), State: jobs.RunPending, Shards: 1, CreatedAt: t0.Add(time.Duration(i) * time.Minute)}
		if err := led.CreateRun(ctx, r, []jobs.Shard{{RunID: id, State: jobs.ShardPending}}); err != nil {
			t.Fatal(err)
		}
	}
	run, at, ok, err := LastScheduledRun(ctx, led, "j")
	if err != nil || !ok || run.ID != "b" || !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("LastScheduledRun = %s at %v, %v, %v; want b at %v", run.ID, at, ok, err, t0.Add(time.Hour))
	}
	if _, _, ok, err := LastScheduledRun(ctx, led, "other"); ok || err != nil {
		t.Errorf("a job without runs: ok %v, %v", ok, err)
	}
}

// TestLoadForView: every spec of the directory loads without its sinks'
// secrets, in name order; a bad spec is named in errs and the others are
// still returned; an unreadable directory is dirErr.
func TestLoadForView(t *testing.T) {
	dir := t.TempDir()
	spec := "name: %s\nschedule: \"0 4 * * *\"\nsource:\n  parquet: { path: \"data/date={{.date}}\" }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { s: s }\nsinks:\n  postgres: { dsn: \"${NEVER_SET_DSN}\", table: t }\n"
	for name, body := range map[string]string{
		"b.yaml":   strings.ReplaceAll(spec, "%s", "b"),
		"a.yml":    strings.ReplaceAll(spec, "%s", "a"),
		"c.yaml":   "name: [not a spec",
		"note.txt": "not a spec",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	specs, errs, err := Dir{Path: dir}.LoadForView(time.Now())
	if err != nil || len(specs) != 2 || specs[0].Name != "a" || specs[1].Name != "b" {
		t.Fatalf("LoadForView = %d specs, %v; want a then b", len(specs), err)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "c.yaml") {
		t.Errorf("errs = %v, want one naming c.yaml", errs)
	}
	if _, _, err := (Dir{Path: filepath.Join(dir, "missing")}).LoadForView(time.Now()); err == nil {
		t.Error("a missing directory gave no error")
	}
}
