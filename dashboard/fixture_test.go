package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// lease is long enough that no fixture lease expires during a test.
const lease = 10 * time.Minute

// seeded names the fixture's runs by the state they are in.
type seeded struct {
	Pending, Running, Succeeded, Failed, Cancelled string
	// Spec is the raw YAML recorded by every run (with a ${…} left).
	Spec string
}

const fixtureSpec = "name: recs\nsinks:\n  redis: { addr: \"${REDIS_ADDR}\", namespace: recs }\n"

// fixtureRejects are the reject sample of the succeeded run's shard 1 (a
// key a page must escape).
var fixtureRejects = []jobs.Reject{
	{Key: "<img src=x>", Position: "data/part-1.parquet row 7", Reason: "non-finite output score (NaN)"},
	{Key: "u-9", Position: "data/part-1.parquet row 9", Reason: "null feature f1"},
}

var runSeq int

// newRun is a run of job with n shards of 1000 rows and distinct params.
func newRun(job string, n int) (jobs.Run, []jobs.Shard) {
	runSeq++
	id := fmt.Sprintf("%s-%d-%d", job, time.Now().UnixNano(), runSeq)
	params := map[string]string{"date": fmt.Sprintf("2026-11-%02d", runSeq%28+1), "seq": fmt.Sprint(runSeq)}
	r := jobs.Run{ID: id, Job: job, Version: fmt.Sprintf("v%d", runSeq), Params: params, ParamsKey: jobs.ParamsKey(params),
		SpecHash: "h", ModelVersion: "m1", Spec: []byte(fixtureSpec), SpecFile: "/jobs/recs.yaml"}
	shards := make([]jobs.Shard, n)
	for i := range shards {
		shards[i] = jobs.Shard{RunID: id, Index: i, Plan: []byte(`{}`), EstRows: 1000}
	}
	return r, shards
}

func mustCreate(t testing.TB, led ledger.Store, job string, n int) jobs.Run {
	t.Helper()
	r, shards := newRun(job, n)
	if err := led.CreateRun(context.Background(), r, shards); err != nil {
		t.Fatalf("create run %s: %v", r.ID, err)
	}
	return r
}

// commit claims one shard of run as worker and commits it with rows, of
// which the sample's were rejected.
func commit(t testing.TB, led ledger.Store, run, worker string, rows int64, sample ...jobs.Reject) {
	t.Helper()
	ctx := context.Background()
	sh, err := led.Claim(ctx, run, worker, lease)
	if err != nil {
		t.Fatalf("claim a shard of %s: %v", run, err)
	}
	if err := led.Complete(ctx, ledger.CompleteParams{RunID: run, Shard: sh.Index, Worker: worker, Counts: jobs.Counts{RowsIn: rows, RowsOut: rows - int64(len(sample)), Rejected: int64(len(sample))}, Sample: sample}); err != nil {
		t.Fatalf("complete shard %d of %s: %v", sh.Index, run, err)
	}
}

func setState(t testing.TB, led ledger.Store, run string, st jobs.RunState, msg string) {
	t.Helper()
	if err := led.SetRunState(context.Background(), run, st, msg); err != nil {
		t.Fatalf("run %s → %s: %v", run, st, err)
	}
}

// seed creates one run in every state: pending (nothing claimed), running
// (1 of 3 shards committed, 1 held by w-b), succeeded, failed (a shard
// failed with an error by w-a) and cancelled.
func seed(t testing.TB, led ledger.Store) seeded {
	t.Helper()
	ctx := context.Background()
	s := seeded{Spec: fixtureSpec}
	s.Pending = mustCreate(t, led, "recs", 2).ID

	s.Running = mustCreate(t, led, "recs", 3).ID
	commit(t, led, s.Running, "w-a", 1000)
	if _, err := led.Claim(ctx, s.Running, "w-b", lease); err != nil {
		t.Fatal(err)
	}

	s.Succeeded = mustCreate(t, led, "scores", 2).ID
	commit(t, led, s.Succeeded, "w-a", 1000)
	commit(t, led, s.Succeeded, "w-b", 1000, fixtureRejects...)
	setState(t, led, s.Succeeded, jobs.RunSucceeded, "")

	s.Failed = mustCreate(t, led, "scores", 2).ID
	commit(t, led, s.Failed, "w-a", 1000)
	sh, err := led.Claim(ctx, s.Failed, "w-a", lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.Fail(ctx, ledger.FailParams{RunID: s.Failed, Shard: sh.Index, Worker: "w-a", Msg: "boom: bad row in part-1.parquet", Retry: false, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	setState(t, led, s.Failed, jobs.RunFailed, "1 shard failed")

	s.Cancelled = mustCreate(t, led, "recs", 2).ID
	setState(t, led, s.Cancelled, jobs.RunCancelled, "cancelled by test")
	return s
}

// ledgers are the real ledgers the handler tests run against.
func ledgers(t *testing.T) map[string]func(t *testing.T) (ledger.Store, Source) {
	return map[string]func(t *testing.T) (ledger.Store, Source){
		"bolt": func(t *testing.T) (ledger.Store, Source) {
			dir := t.TempDir()
			l, err := bolt.OpenIn(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l, Shared{L: l, Name: "test bolt"}
		},
		"postgres": func(t *testing.T) (ledger.Store, Source) {
			pg := testservers.Postgres(t)
			l, err := postgres.Open(context.Background(), pg.DSN, postgres.Options{PollOnly: true, MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l, Shared{L: l, Name: "test postgres"}
		},
	}
}

// ledgerActions are the buttons over a ledger alone (no sinks): what the
// tests of this package need; cmd/precog wires the real commands.
func ledgerActions(led ledger.Store) Actions {
	return Actions{
		Cancel: func(ctx context.Context, id string) (string, error) {
			if err := led.SetRunState(ctx, id, jobs.RunCancelled, "cancelled from the dashboard"); err != nil {
				return "", err
			}
			return "run " + id + " cancelled", nil
		},
		Retry: func(ctx context.Context, id string) (string, error) {
			n, err := led.RetryFailed(ctx, id)
			return fmt.Sprintf("%d failed shard(s) back to pending", n), err
		},
	}
}
