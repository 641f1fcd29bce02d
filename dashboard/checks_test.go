package dashboard

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/profile"
	"github.com/precog-ml/precog/runner"
)

// checkedSpec is a spec with checks: score's distribution may not shift.
const checkedSpec = "name: scored\nsource:\n  parquet: { path: data/x.parquet }\n  key: user_id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { score: score, items: items }\nsinks:\n  redis: { addr: \"${REDIS_ADDR}\", namespace: scored }\nchecks:\n  rows: { min_ratio: 0.5 }\n  outputs:\n    score: { max_psi: 0.2, range: [0, 10] }\n"

// shardProfile is the output profile of n rows whose score is
// from + i/n, built as a worker builds it from its output batches.
func shardProfile(t *testing.T, n int, from float64) *profile.Profile {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "user_id", Type: arrow.BinaryTypes.String},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
		{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.StringBuilder).Append("u" + strconv.Itoa(i))
		b.Field(1).(*array.Float32Builder).Append(float32(from + float64(i)/float64(n)))
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int64Builder).Append(int64(i))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	pb := profile.NewBuilder(profile.Options{Fields: []string{"score", "items"}, SampleSize: 100})
	pb.Add(rec, 0)
	return pb.Profile()
}

// profiledRun creates a run of checkedSpec whose one shard commits n rows
// with the profile of shardProfile(n, from), as a worker does.
func profiledRun(t *testing.T, l ledger.Store, n int, from float64) (jobs.Run, *profile.Profile) {
	t.Helper()
	ctx := context.Background()
	r, shards := newRun("scored", 1)
	r.Spec = []byte(checkedSpec)
	if err := l.CreateRun(ctx, r, shards); err != nil {
		t.Fatal(err)
	}
	sh, err := l.Claim(ctx, r.ID, "w-a", lease)
	if err != nil {
		t.Fatal(err)
	}
	p := shardProfile(t, n, from)
	if err := l.(ledger.Checks).PutShardProfile(ctx, r.ID, sh.Index, p.Encode()); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: sh.Index, Worker: "w-a", Counts: jobs.Counts{RowsIn: int64(n), RowsOut: int64(n)}}); err != nil {
		t.Fatal(err)
	}
	return r, p
}

// TestHeldRunPage: a run held by its checks (its scores shifted from [0,1)
// to [2,3)) shows each check with its value, threshold and result, the
// held state's way out, and for the scalar output score the published
// version's histogram in the lower bins and the run's in the upper ones.
func TestHeldRunPage(t *testing.T) {
	ctx := context.Background()
	l, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	spec, err := jobs.ParseForView([]byte(checkedSpec), "/jobs/scored.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	base, baseProf := profiledRun(t, l, 2000, 0)
	setState(t, l, base.ID, jobs.RunSucceeded, "")
	if err := l.PutBaseline(ctx, ledger.Baseline{Job: "scored", Target: runner.CheckTarget(spec), RunID: base.ID, Version: base.Version, RowsOut: 2000, Profile: baseProf.Encode()}); err != nil {
		t.Fatal(err)
	}
	held, heldProf := profiledRun(t, l, 2000, 2)
	rep := profile.Evaluate(spec.Checks, &profile.Baseline{RunID: base.ID, Version: base.Version, RowsOut: 2000, Profile: baseProf}, heldProf, 2000)
	if rep.Passed {
		t.Fatalf("a shift of 2 passed the checks: %+v", rep)
	}
	b, _ := json.Marshal(rep)
	if err := l.PutCheckReport(ctx, held.ID, b); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold(ctx, held.ID, "checks failed"); err != nil {
		t.Fatal(err)
	}

	ts := newServer(t, Options{Source: Shared{L: l, Name: "test"}})
	code, body, _ := get(t, ts, "/runs/"+held.ID, token)
	if code != 200 {
		t.Fatalf("run page = %d\n%s", code, body)
	}
	for _, want := range []string{"Held: nothing was published", "precog publish " + held.ID + " --accept", base.Version, "/runs/" + base.ID} {
		if !strings.Contains(body, want) {
			t.Errorf("held run page lacks %q", want)
		}
	}
	for _, c := range rep.Checks {
		row := regexp.MustCompile(`(?s)<tr data-check="` + regexp.QuoteMeta(c.Name) + `">.*?</tr>`).FindString(body)
		result := "passed"
		if !c.Passed {
			result = "FAILED"
		}
		if row == "" || !strings.Contains(row, strconv.FormatFloat(c.Value, 'g', 4, 64)) || !strings.Contains(row, result) {
			t.Errorf("check %s (value %.4g, %s): row %q", c.Name, c.Value, result, row)
		}
	}
	if !strings.Contains(body, `<tr data-check="outputs.score.max_psi"><td>outputs.score.max_psi</td><td>`) || !strings.Contains(body, "FAILED") {
		t.Error("no row of the failed PSI check outputs.score.max_psi")
	}
	if strings.Contains(body, `data-field="items"`) {
		t.Error("a histogram of the list output items: only scalar outputs get one")
	}
	fig := regexp.MustCompile(`(?s)<figure class="chart" data-field="score">.*?</figure>`).FindString(body)
	if fig == "" {
		t.Fatalf("no histogram of score:\n%s", body)
	}
	mass := func(class string) (low, high float64) {
		ms := regexp.MustCompile(`<rect class="`+class+`" x="([0-9.]+)" y="[0-9.]+" width="[0-9.]+" height="([0-9.]+)"`).FindAllStringSubmatch(fig, -1)
		if len(ms) != histBins {
			t.Fatalf("%d %s bars, want %d:\n%s", len(ms), class, histBins, fig)
		}
		for _, m := range ms {
			x, _ := strconv.ParseFloat(m[1], 64)
			h, _ := strconv.ParseFloat(m[2], 64)
			if x < histW/2 {
				low += h
			} else {
				high += h
			}
		}
		return low, high
	}
	if lo, hi := mass("old"); hi != 0 || lo == 0 {
		t.Errorf("published version's bars: %v low, %v high; want all in the lower half ([0,1) of [0,3))", lo, hi)
	}
	if lo, hi := mass("new"); lo != 0 || hi == 0 {
		t.Errorf("held run's bars: %v low, %v high; want all in the upper half", lo, hi)
	}

	// A run without checks shows no checks section.
	if _, body, _ := get(t, ts, "/runs/"+mustCreate(t, l, "plain", 1).ID, token); strings.Contains(body, "Checks before publish") {
		t.Error("a run without a checks' report shows a checks section")
	}
}
