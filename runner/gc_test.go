package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// gcFixture is a job with all three sinks, an embedded ledger, and runs
// v1, v2 published, v3 killed (its ledger run ended failed, its data left
// behind), v4 open (killed, resumable); plus a user's file, table and key
// beside precog's.
type gcFixture struct {
	spec   *jobs.Spec
	led    *bolt.Ledger
	target string // the Parquet directory
	pg     *testservers.PG
	rd     *testservers.RedisServer
}

func newGCFixture(t *testing.T) *gcFixture {
	t.Helper()
	ctx := context.Background()
	pg, rd := testservers.Postgres(t), testservers.Redis(t)
	dir := t.TempDir()
	f := &gcFixture{target: filepath.Join(dir, "out", "recs"), pg: pg, rd: rd}
	f.spec = &jobs.Spec{Name: "sinktest", Source: jobs.SourceSpec{Key: sinktest.IntKey}, Sinks: jobs.SinksSpec{
		Parquet:  &jobs.ParquetSinkSpec{Path: f.target},
		Postgres: &jobs.PostgresSinkSpec{DSN: pg.DSN, Table: "recs"},
		Redis:    &jobs.RedisSinkSpec{Addr: rd.Addr, DB: rd.DB, Password: rd.Password, Namespace: rd.Prefix + "recs", TTL: jobs.Duration{Duration: time.Hour}},
	}}
	led, err := bolt.OpenIn(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	f.led = led
	snks, err := OpenSinks(ctx, f.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range snks {
			s.Close()
		}
	}()
	states := map[string]jobs.RunState{"v1": jobs.RunSucceeded, "v2": jobs.RunSucceeded, "v3": jobs.RunFailed, "v4": jobs.RunRunning}
	for _, v := range []string{"v1", "v2", "v3", "v4"} {
		run := sinktest.NewRun(v, false, nil)
		if err := led.CreateRun(ctx, jobs.Run{ID: run.RunID, Job: run.Job, Version: v, ParamsKey: jobs.ParamsKey(nil), State: jobs.RunPending},
			[]jobs.Shard{{Index: 0, State: jobs.ShardPending}}); err != nil {
			t.Fatal(err)
		}
		for _, s := range snks {
			writeShard(t, s, run, 10)
			if v == "v1" || v == "v2" {
				if err := s.Stage(ctx, run, []sinks.CommittedShard{{Index: 0, Rows: 10}}); err != nil {
					t.Fatalf("%s: Stage(%s): %v", s.Name(), v, err)
				}
				if err := s.Publish(ctx, run); err != nil {
					t.Fatalf("%s: Publish(%s): %v", s.Name(), v, err)
				}
			}
		}
		if err := led.SetRunState(ctx, run.RunID, states[v], ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(f.target), "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, "CREATE TABLE public.recs__v9 (x int)")
	rd.Client(t).Set(ctx, rd.Prefix+"recs:keys:v9x", "not precog's", 0) // a string, but no version precog wrote
	return f
}

// writeShard prepares run on s and commits rows [0, n) as shard 0.
func writeShard(t *testing.T, s sinks.Sink, run sinks.RunInfo, n int) {
	t.Helper()
	ctx := context.Background()
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatalf("%s: Prepare(%s): %v", s.Name(), run.Version, err)
	}
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Batch(run, 0, n)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// actions summarises a report: "sink version action" per entry, sorted.
func actions(rep GCReport) []string {
	var out []string
	for _, e := range rep.Entries {
		out = append(out, fmt.Sprintf("%s %s %s", e.Sink, e.Version, e.Action))
	}
	slices.Sort(out)
	return out
}

// TestGC: dry-run lists exactly the killed run's data in every sink as
// "would remove" and changes nothing; gc removes it, and the open run's,
// the published ones' and the user's things remain.
func TestGC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newGCFixture(t)
	want := []string{
		"parquet v1 kept", "parquet v2 kept", "parquet v3 %s", "parquet v4 kept",
		"postgres v1 kept", "postgres v2 kept", "postgres v3 %s", "postgres v4 kept",
		"redis v1 kept", "redis v2 kept", "redis v3 %s", "redis v4 kept",
	}
	wantWith := func(action string) []string {
		out := make([]string, len(want))
		for i, w := range want {
			out[i] = strings.Replace(w, "%s", action, 1)
		}
		return out
	}
	rep, err := GC(ctx, f.spec, f.led, GCOptions{DryRun: true})
	if err != nil {
		t.Fatalf("GC dry-run: %v", err)
	}
	if got := actions(rep); !slices.Equal(got, wantWith(GCWouldRemove)) {
		t.Fatalf("dry-run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantWith(GCWouldRemove), "\n"))
	}
	if rep.Runs != 4 || rep.OpenRuns != 1 {
		t.Errorf("report counts %d runs, %d open; want 4, 1", rep.Runs, rep.OpenRuns)
	}
	for _, e := range rep.Entries {
		if e.Version == "v4" && !strings.Contains(e.Reason, "open run run-v4 (running)") {
			t.Errorf("open run's entry %+v does not name the run", e)
		}
	}
	// Nothing changed: the same report again.
	again, err := GC(ctx, f.spec, f.led, GCOptions{DryRun: true})
	if err != nil || !slices.Equal(actions(again), actions(rep)) {
		t.Fatalf("second dry-run differs (%v):\n%s", err, strings.Join(actions(again), "\n"))
	}

	rep, err = GC(ctx, f.spec, f.led, GCOptions{})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := actions(rep); !slices.Equal(got, wantWith(GCRemoved)) {
		t.Fatalf("gc:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantWith(GCRemoved), "\n"))
	}
	rep, err = GC(ctx, f.spec, f.led, GCOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, w := range want {
		if !strings.Contains(w, "%s") {
			left = append(left, w)
		}
	}
	if got := actions(rep); !slices.Equal(got, left) {
		t.Fatalf("after gc:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(left, "\n"))
	}
	// The user's things.
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.target), "notes.txt")); err != nil {
		t.Errorf("user's file: %v", err)
	}
	var n int
	if err := f.pg.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'recs__v9'").Scan(&n); err != nil || n != 1 {
		t.Errorf("user's table recs__v9: %d, %v", n, err)
	}
	if f.rd.Client(t).Exists(ctx, f.rd.Prefix+"recs:keys:v9x").Val() != 1 {
		t.Error("another application's key was deleted")
	}
}

// TestGCSkipsLockedSink: a sink whose target a live writer holds is
// skipped with a *sinks.LockedError naming the writer; the others are
// cleaned.
func TestGCSkipsLockedSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newGCFixture(t)
	snks, err := OpenSinks(ctx, &jobs.Spec{Name: f.spec.Name, Sinks: jobs.SinksSpec{Parquet: f.spec.Sinks.Parquet}})
	if err != nil {
		t.Fatal(err)
	}
	defer snks[0].Close()
	writer := sinks.RunInfo{Job: f.spec.Name, RunID: "run-live", Version: "v5"}
	l, err := snks[0].Lock(ctx, writer, sinks.ThisProcess(writer))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rep, err := GC(ctx, f.spec, f.led, GCOptions{})
	var locked *sinks.LockedError
	if !errors.As(err, &locked) || locked.Holder.RunID != "run-live" {
		t.Fatalf("GC with the parquet target held = %v, want a *sinks.LockedError naming run-live", err)
	}
	got := map[string]GCEntry{}
	for _, e := range rep.Entries {
		got[e.Sink+" "+e.Version] = e
	}
	if e := got["parquet v3"]; e.Action != GCSkipped || !strings.Contains(e.Reason, "run-live") {
		t.Errorf("parquet v3: %+v, want skipped naming run-live", e)
	}
	for _, k := range []string{"postgres v3", "redis v3"} {
		if e := got[k]; e.Action != GCRemoved {
			t.Errorf("%s: %+v, want removed", k, e)
		}
	}
}
