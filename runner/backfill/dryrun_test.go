package backfill

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/runner"
)

// TestPlanDryRun: a dry run lists every partition, sums the found ones'
// rows and shards, counts the missing one, and probes the first found
// partition with its own plans; it ends refused, after the listing, where
// the backfill would refuse the range or nothing is found; the range it plans is recorded as its
// first and last values (Range.Request).
func TestPlanDryRun(t *testing.T) {
	dir := t.TempDir()
	if _, err := testgen.WriteDataset(filepath.Join(dir, "data"), testgen.Dataset{Seed: 1, Dates: []string{"2026-11-02", "2026-11-03"}, FilesPerDate: 2, RowsPerFile: 300}); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte(backfillSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	rg, err := PlanRange(RangeRequest{SpecFile: spec, Param: "dt", From: "2026-11-01", To: "2026-11-03", Step: "1d", Parallel: 2, ShardParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rg.Refused == nil {
		t.Error("a range with a missing partition was not refused")
	}
	d := PlanDryRun(context.Background(), rg)
	if len(d.List) != 3 || d.List[0].Found || !d.List[1].Found || !d.List[2].Found || d.List[0].Error == "" {
		t.Fatalf("listing = %+v; want 2026-11-01 missing (with its error), the others found", d.List)
	}
	if d.Missing != 1 || d.Found != 2 || d.Rows != 1200 || d.Shards != d.List[1].Shards+d.List[2].Shards || d.Shards < 2 {
		t.Errorf("totals: %d missing, %d found, %d rows, %d shards; want 1, 2, 1200 and the found partitions' shards", d.Missing, d.Found, d.Rows, d.Shards)
	}
	if d.Probe == nil || d.Probe.Params["dt"] != "2026-11-02" || len(d.ProbePlans) != d.List[1].Shards {
		t.Fatalf("probe: %v with %d plans; want 2026-11-02's spec and its %d plans", d.Probe, len(d.ProbePlans), d.List[1].Shards)
	}
	p := d.EstimateParams(2, dir)
	if p.Spec != d.Probe || p.Rows != 1200 || p.Runs != 2 || p.Shards != d.Shards || p.Parallel != 2 || p.StateDir != dir {
		t.Errorf("EstimateParams = %+v", p)
	}
	var refused *runner.RefusedError
	if !errors.As(d.Refused, &refused) || !strings.Contains(d.Refused.Error(), "the backfill would refuse this range: ") || !strings.Contains(d.Refused.Error(), "dt=2026-11-01") {
		t.Errorf("Refused = %v, want the range's refusal naming the missing partition", d.Refused)
	}
	none, err := PlanRange(RangeRequest{SpecFile: spec, Param: "dt", From: "2026-10-01", To: "2026-10-02", Step: "1d", Parallel: 1, ShardParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	none.Refused = nil // a source the range's checks cannot see missing (a Postgres query)
	if d := PlanDryRun(context.Background(), none); d.Probe != nil || !errors.As(d.Refused, &refused) || !strings.Contains(d.Refused.Error(), "every partition is missing") {
		t.Errorf("every partition missing: probe %v, %v", d.Probe, d.Refused)
	}
	req := rg.Request()
	if req.SpecFile != spec || req.Param != "dt" || req.From != "2026-11-01" || req.To != "2026-11-03" || req.Step != "1d" || req.Parallel != 2 || len(req.Partitions) != 3 {
		t.Errorf("Request = %+v", req)
	}
}
