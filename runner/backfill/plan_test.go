package backfill

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
)

func TestValueRange(t *testing.T) {
	got, err := valueRange("2026-11-01T21", "2026-11-02T01", "1h")
	if want := []string{"2026-11-01T21", "2026-11-01T22", "2026-11-01T23", "2026-11-02T00", "2026-11-02T01"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("hourly = %v, %v; want %v", got, err, want)
	}
	got, err = valueRange("2026-11-01T00", "2026-11-01T23", "6h")
	if want := []string{"2026-11-01T00", "2026-11-01T06", "2026-11-01T12", "2026-11-01T18"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("6h = %v, %v", got, err)
	}
	got, err = valueRange("2026-02-27", "2026-03-01", "1d")
	if want := []string{"2026-02-27", "2026-02-28", "2026-03-01"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("daily = %v, %v", got, err)
	}
	for _, tc := range []struct{ from, to, step, want string }{
		{"2026-11-01", "2026-11-02", "1h", `--from "2026-11-01": want YYYY-MM-DDTHH for --step 1h`},
		{"2026-11-01T00", "2026-11-02", "1d", `--from "2026-11-01T00": want YYYY-MM-DD`},
		{"2026-11-02", "2026-11-01", "1d", "--to 2026-11-01 is before --from 2026-11-02"},
		{"2026-11-01", "2026-11-02", "1w", `--step "1w": want 1d or Nh`},
		{"2026-11-01T00", "2026-11-02T00", "24h", `--step "24h"`},
		{"", "2026-11-02", "1d", "--from and --to are required"},
		{"2000-01-01", "2099-01-01", "1d", "more than 3660 values"},
	} {
		if _, err := valueRange(tc.from, tc.to, tc.step); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("valueRange(%s, %s, %s) = %v, want %q", tc.from, tc.to, tc.step, err, tc.want)
		}
	}
}

const backfillSpec = `name: scores
source:
  parquet: { path: "data/dt={{.dt}}" }
  key: user_id
model:
  path: models/ranker.onnx
  inputs:
    features: { columns: [f0] }
  outputs: { score: score }
sinks:
  parquet: { path: "out/dt={{.dt}}" }
`

// Every missing partition is named in one error before anything runs.
func TestLoadRangeListsMissingPartitions(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte(backfillSpec), 0o644)
	for _, d := range []string{"2026-11-01", "2026-11-03"} {
		os.MkdirAll(filepath.Join(dir, "data", "dt="+d), 0o755)
		os.WriteFile(filepath.Join(dir, "data", "dt="+d, "part-0.parquet"), []byte("x"), 0o644)
	}
	os.MkdirAll(filepath.Join(dir, "data", "dt=2026-11-04"), 0o755) // no files
	values, _ := valueRange("2026-11-01", "2026-11-04", "1d")
	_, err := loadRange(spec, nil, "dt", values)
	if err == nil {
		t.Fatal("loadRange accepted missing partitions")
	}
	msg := err.Error()
	for _, want := range []string{"2 of 4 partitions missing, nothing ran", "dt=2026-11-02: ", "dt=2026-11-04: "} {
		if !strings.Contains(msg, want) {
			t.Errorf("error\n%s\nlacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "dt=2026-11-01:") || strings.Contains(msg, "dt=2026-11-03:") {
		t.Errorf("error names a present partition:\n%s", msg)
	}
	specs, err := loadRange(spec, nil, "dt", values[:1])
	if err != nil || len(specs) != 1 || specs[0].Params["dt"] != "2026-11-01" {
		t.Fatalf("one present partition: %v", err)
	}
	if _, err := loadRange(spec, nil, "date", values[:1]); err == nil || !strings.Contains(err.Error(), `template uses param "dt", which was not given`) {
		t.Errorf("wrong --param-name: %v", err)
	}
	if _, err := loadRange(spec, []string{"regoin=eu"}, "dt", values[:1]); err == nil || !strings.Contains(err.Error(), "--param regoin: not used") {
		t.Errorf("unused --param: %v", err)
	}
}

func TestCheckRangePublish(t *testing.T) {
	load := func(extra, value string) *jobs.Spec {
		s, err := jobs.Parse([]byte(backfillSpec+extra), "job.yaml", map[string]string{"dt": value}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	two := func(extra string) []*jobs.Spec {
		return []*jobs.Spec{load(extra, "2026-11-01"), load(extra, "2026-11-02")}
	}
	if err := checkRangePublish(two(""), "dt", 2); err != nil {
		t.Errorf("parquet per dt: %v", err)
	}
	for _, tc := range []struct{ extra, want string }{
		{"  postgres: { dsn: x, table: scores }\n", "sinks.postgres.mode: replace: each dt's run would replace the view public.scores"},
		{"  redis: { addr: x, namespace: recs }\n", "sinks.redis.publish: atomic: recs:current is one per namespace"},
	} {
		err := checkRangePublish(two(tc.extra), "dt", 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.extra, err, tc.want)
		}
		if err := checkRangePublish(two(tc.extra)[:1], "dt", 2); err != nil {
			t.Errorf("one value is fine: %v", err)
		}
	}
	for _, ok := range []string{"  postgres: { dsn: x, table: scores, mode: upsert }\n", "  redis: { addr: x, namespace: recs, publish: in_place }\n"} {
		if err := checkRangePublish(two(ok), "dt", 1); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	// Dates writing the same keys in place: refused at --parallel > 1 up
	// front, naming the alternatives; a namespace per date runs in parallel.
	inPlace := "  redis: { addr: x, namespace: recs, publish: in_place }\n"
	if err := checkRangePublish(two(inPlace), "dt", 2); err == nil || !strings.Contains(err.Error(), "--parallel 2 would have them fail") ||
		!strings.Contains(err.Error(), `namespace: "recs-{{.dt}}"`) || !strings.Contains(err.Error(), "--parallel 1 to run them in order") {
		t.Errorf("in-place shared namespace at --parallel 2: %v", err)
	}
	for _, perDate := range []string{"  redis: { addr: x, namespace: \"recs-{{.dt}}\", publish: in_place }\n", "  redis: { addr: x, namespace: \"recs-{{.dt}}\" }\n"} {
		if err := checkRangePublish(two(perDate), "dt", 4); err != nil {
			t.Errorf("%s at --parallel 4: %v", perDate, err)
		}
	}
	same := strings.Replace(backfillSpec, `out/dt={{.dt}}`, "out/all", 1)
	a, _ := jobs.Parse([]byte(same), "", map[string]string{"dt": "1"}, nil)
	b, _ := jobs.Parse([]byte(same), "", map[string]string{"dt": "2"}, nil)
	if err := checkRangePublish([]*jobs.Spec{a, b}, "dt", 1); err == nil || !strings.Contains(err.Error(), "sinks.parquet.path: out/all does not use {{.dt}}") {
		t.Errorf("shared parquet path: %v", err)
	}
}

// loadRange is PlanRange's spec loading and partition check.
func loadRange(path string, params []string, name string, values []string) ([]*jobs.Spec, error) {
	specs, err := loadRangeSpecs(path, params, name, values)
	if err != nil {
		return nil, err
	}
	if err := missingPartitions(path, name, values, specs); err != nil {
		return nil, err
	}
	return specs, nil
}

// One bar over the range: totals add up, unseen values are estimated, the
// ETA comes from the rows read by this process.
func TestRangeProgress(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := NewRangeProgress("date", []string{"d1", "d2", "d3", "d4"}, t0)
	p := a.Update("d1", runner.Progress{RowsDone: 100, RowsTotal: 400, ShardsDone: 1, ShardsTotal: 4, Rate: 100, Elapsed: time.Second}, t0.Add(time.Second))
	if p.RowsTotal != 1600 || p.RowsDone != 100 {
		t.Errorf("one value seen: %+v, want total 1600 (400 × 4 values)", p)
	}
	// d2 resumed with 200 rows already committed: they do not count as speed.
	a.Update("d2", runner.Progress{RowsDone: 200, RowsTotal: 200, Elapsed: time.Second}, t0.Add(2*time.Second))
	p = a.Update("d1", runner.Progress{RowsDone: 300, RowsTotal: 400, ShardsDone: 3, ShardsTotal: 4, Rate: 100, Elapsed: 3 * time.Second}, t0.Add(3*time.Second))
	if p.RowsDone != 500 || p.RowsTotal != 1200 || p.ShardsDone != 3 {
		t.Errorf("two values: %+v, want 500 of 1200 (600 seen + 2 × 300)", p)
	}
	if want := 100.0; p.Rate != want { // 300 fresh rows in 3 s
		t.Errorf("rate %v, want %v", p.Rate, want)
	}
	if want := 7 * time.Second; p.ETA != want {
		t.Errorf("ETA %v, want %v", p.ETA, want)
	}
	p = a.Finish("d3", runner.Result{AlreadyDone: true, Run: jobs.Run{Shards: 2, Counts: jobs.Counts{RowsIn: 50}}}, t0.Add(4*time.Second))
	if !strings.Contains(p.RunID, "1/4 done") || p.RowsDone != 550 {
		t.Errorf("after d3 done: %+v", p)
	}
}

// TestPlanRangeRefusals: every request PlanRange cannot plan is a
// *runner.RefusedError naming what is wrong (a reversed range, more than
// MaxValues values, a value in the wrong layout, parallel below 1, --param
// setting the range's own param), and a range the backfill refuses
// (missing partitions, a sink keeping only the last value) is still
// planned, with every reason in Refused, for a dry run to list.
func TestPlanRangeRefusals(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte(strings.Replace(backfillSpec, `out/dt={{.dt}}`, "out/all", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data", "dt=2026-11-01"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "dt=2026-11-01", "part-0.parquet"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := RangeRequest{SpecFile: spec, Param: "dt", From: "2026-11-01", To: "2026-11-03", Step: "1d", Parallel: 1, ShardParallel: 1}
	for _, tc := range []struct {
		change func(*RangeRequest)
		want   string
	}{
		{func(r *RangeRequest) { r.From, r.To = "2026-11-03", "2026-11-01" }, "--to 2026-11-01 is before --from 2026-11-03"},
		{func(r *RangeRequest) { r.From, r.To = "2016-01-01", "2026-12-31" }, "more than 3660 values"},
		{func(r *RangeRequest) { r.Step, r.To = "1h", "2026-11-01T05" }, `--from "2026-11-01": want YYYY-MM-DDTHH for --step 1h`},
		{func(r *RangeRequest) { r.From = "11/01/2026" }, `--from "11/01/2026": want YYYY-MM-DD for --step 1d`},
		{func(r *RangeRequest) { r.Step = "0h" }, `--step "0h": want 1d or Nh`},
		{func(r *RangeRequest) { r.Parallel = 0 }, "--parallel and --shard-parallel must be >= 1 (got 0, 1)"},
		{func(r *RangeRequest) { r.ShardParallel = 0 }, "--parallel and --shard-parallel must be >= 1 (got 1, 0)"},
		{func(r *RangeRequest) { r.Params = []string{"dt=2026-11-02"} }, "--param dt: set by backfill from --from/--to"},
		{func(r *RangeRequest) { r.Param = "date" }, `template uses param "dt", which was not given`},
	} {
		req := ok
		tc.change(&req)
		rg, err := PlanRange(req)
		var ref *runner.RefusedError
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), tc.want) || rg.Values != nil {
			t.Errorf("PlanRange(%+v) = %v, %v; want a *runner.RefusedError saying %q and no values", req, rg.Values, err, tc.want)
		}
	}
	// Exactly MaxValues values are fine.
	if vs, err := valueRange("2020-01-01", time.Date(2020, 1, MaxValues, 0, 0, 0, 0, time.UTC).Format(time.DateOnly), "1d"); err != nil || len(vs) != MaxValues {
		t.Errorf("a range of MaxValues values: %d values, %v", len(vs), err)
	}
	if _, err := valueRange("2020-01-01", time.Date(2020, 1, MaxValues+1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly), "1d"); err == nil {
		t.Errorf("a range of MaxValues+1 values was accepted")
	}

	rg, err := PlanRange(ok)
	if err != nil {
		t.Fatal(err)
	}
	if len(rg.Partitions) != 3 || rg.Partitions[2].Value != "2026-11-03" || rg.Partitions[2].Spec.Params["dt"] != "2026-11-03" {
		t.Fatalf("partitions %+v, want one per value with its spec", rg.Partitions)
	}
	var ref *runner.RefusedError
	if !errors.As(rg.Refused, &ref) {
		t.Fatalf("Refused = %v, want a *runner.RefusedError", rg.Refused)
	}
	for _, want := range []string{"2 of 3 partitions missing", "dt=2026-11-02: ", "dt=2026-11-03: ", "out/all does not use {{.dt}}"} {
		if !strings.Contains(rg.Refused.Error(), want) {
			t.Errorf("Refused\n%v\nlacks %q", rg.Refused, want)
		}
	}
	if specs := rg.Specs(); len(specs) != 3 || specs["2026-11-01"] != rg.Partitions[0].Spec {
		t.Errorf("Specs() = %v", specs)
	}
}
