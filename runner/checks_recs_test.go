package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// TestChecksRecsOverlap: a recs job (top-50 lists into Redis and Parquet):
// a refresh of the same model passes min_overlap_at_k; a model whose lists
// differ is held by it, with the report's sample error stated.
func TestChecksRecsOverlap(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := testgen.Write(filepath.Join(dir, "models"), "recs"); err != nil {
		t.Fatal(err)
	}
	if _, err := testgen.WriteDataset(filepath.Join(dir, "data"), testgen.Dataset{Seed: 5, FilesPerDate: 2, RowsPerFile: 400}); err != nil {
		t.Fatal(err)
	}
	rd := testservers.Redis(t)
	cols := make([]string, 16)
	for i := range cols {
		cols[i] = testgen.FeatureColumn(i)
	}
	body := fmt.Sprintf(`name: recs
source:
  parquet: { path: data }
  key: user_id
  rows_per_shard: 300
model:
  path: models/recs.onnx
  inputs: { features: { columns: [%s] } }
  outputs: { topk_items: items, topk_scores: item_scores }
sinks:
  parquet: { path: out }
  redis: { addr: %q, db: %d, password: %q, namespace: %srecs }
checks:
  outputs:
    topk_items: { min_overlap_at_k: 0.9 }
  sample_size: 300
`, strings.Join(cols, ", "), rd.Addr, rd.DB, rd.Password, rd.Prefix)
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() (Result, error) {
		spec, err := jobs.Load(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return RunLocal(ctx, spec, LocalOptions{StateDir: filepath.Join(dir, "state")})
	}
	if _, err := run(); err != nil {
		t.Fatal(err)
	}
	again, err := run()
	if err != nil {
		t.Fatalf("a refresh of the same model was not published: %v", err)
	}
	led := (&checksFixture{state: filepath.Join(dir, "state")}).ledger(t)
	rep := (&checksFixture{}).report(t, led, again.Run.ID)
	if c := findCheck(rep, "outputs.items.min_overlap_at_k"); !c.Passed || c.Value != 1 {
		t.Errorf("same model's overlap: %+v", c)
	}
	led.Close()

	if err := testgen.NewRecs(testgen.DefaultSeed + 1).WriteONNX(filepath.Join(dir, "models", "recs.onnx")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(); !errors.Is(err, ErrHeld) {
		t.Fatalf("a model with other lists: %v, want held", err)
	}
	led = (&checksFixture{state: filepath.Join(dir, "state")}).ledger(t)
	defer led.Close()
	runs, err := led.Runs(ctx, "recs", 1)
	if err != nil {
		t.Fatal(err)
	}
	rep = (&checksFixture{}).report(t, led, runs[0].ID)
	c := findCheck(rep, "outputs.items.min_overlap_at_k")
	t.Logf("overlap after the swap: %+v", c)
	if c.Passed || !strings.Contains(c.Error, "n=300") {
		t.Fatalf("overlap check: %+v", c)
	}
}
