package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sources"
)

// racingLedger opens a run of its own before CreateBackfill, as another
// process can between Ensure's reads and its write.
type racingLedger struct {
	Ledger
	race func()
}

func (r racingLedger) CreateBackfill(ctx context.Context, b ledger.Backfill, add []ledger.BackfillRun) error {
	r.race()
	return r.Ledger.CreateBackfill(ctx, b, add)
}

// TestEnsureRefusesAValueOpenedMeanwhile: when another process opens a run
// of a value between Ensure's reads and its write, the ledger refuses the
// whole backfill and Ensure says so as a *runner.RefusedError (exit 2)
// naming the open run; nothing is recorded.
func TestEnsureRefusesAValueOpenedMeanwhile(t *testing.T) {
	ctx := context.Background()
	led := boltLedger(t, t.TempDir())
	spec, err := jobs.Parse([]byte(backfillSpec), "job.yaml", map[string]string{"dt": "2026-11-01"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	race := func() {
		r := jobs.Run{ID: "other-run", Job: spec.Name, ParamsKey: jobs.ParamsKey(spec.Params), State: jobs.RunPending, Shards: 1, CreatedAt: time.Now()}
		if err := led.CreateRun(ctx, r, []jobs.Shard{{RunID: r.ID, State: jobs.ShardPending}}); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(context.Context, *jobs.Spec) (string, []sources.ShardPlan, error) {
		return "v1", []sources.ShardPlan{{Plan: json.RawMessage(`{}`), Rows: 1}}, nil
	}
	_, err = Ensure(ctx, racingLedger{Ledger: led, race: race}, Request{SpecFile: "job.yaml", Param: "dt", From: "2026-11-01", To: "2026-11-01", Step: "1d",
		Partitions: []Partition{{Value: "2026-11-01", Spec: spec}}, Parallel: 1, Plan: plan})
	var refused *runner.RefusedError
	var open *ledger.OpenRunError
	if !errors.As(err, &refused) || !errors.As(err, &open) || open.RunID != "other-run" {
		t.Fatalf("Ensure = %v, want a *runner.RefusedError of the ledger's *OpenRunError naming other-run", err)
	}
	if bs, err := led.Backfills(ctx, "", 0); err != nil || len(bs) != 0 {
		t.Errorf("backfills after the refusal: %v, %v; want none", bs, err)
	}
}

// TestRetryRefusesASpecThatDoesNotLoad: a failed value whose recorded spec
// needs a variable this environment lacks is a *runner.RefusedError
// naming it, and nothing changes (no new run, the backfill still
// cancelled).
func TestRetryRefusesASpecThatDoesNotLoad(t *testing.T) {
	ctx := context.Background()
	led := boltLedger(t, t.TempDir())
	body := strings.Replace(backfillSpec, `"out/dt=`, `"${BF_OUT}/dt=`, 1)
	r := jobs.Run{ID: "r1", Job: "scores", ParamsKey: "dt=2026-11-01", State: jobs.RunPending, Shards: 1, CreatedAt: time.Now(),
		Spec: []byte(body), SpecFile: "job.yaml", Params: map[string]string{"dt": "2026-11-01"}}
	b := ledger.Backfill{ID: "scores-bf-1", Job: "scores", Param: "dt", From: "2026-11-01", To: "2026-11-01", Step: "1d", Parallel: 1}
	if err := led.CreateBackfill(ctx, b, []ledger.BackfillRun{{Value: "2026-11-01", Run: r, Shards: []jobs.Shard{{RunID: r.ID, State: jobs.ShardPending}}}}); err != nil {
		t.Fatal(err)
	}
	setState(t, led, r.ID, jobs.RunFailed, "boom")
	if err := led.SetBackfill(ctx, b.ID, 1, true); err != nil {
		t.Fatal(err)
	}
	unset := func(string) (string, bool) { return "", false }
	_, err := Retry(ctx, led, b.ID, unset, nil)
	var refused *runner.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "BF_OUT") {
		t.Fatalf("Retry = %v, want a *runner.RefusedError naming BF_OUT", err)
	}
	after, err := led.Backfill(ctx, b.ID)
	if err != nil || !after.Cancelled || len(after.Dates) != 1 || len(after.Dates[0].Runs) != 1 {
		t.Errorf("after the refusal: %+v, %v; want unchanged", after, err)
	}
}
