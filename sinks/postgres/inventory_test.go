package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func storedSummary(t *testing.T, s *Sink) (string, []sinks.StoredVersion) {
	t.Helper()
	got, err := s.Stored(context.Background(), sinks.RunInfo{Job: testJob})
	if err != nil {
		t.Fatalf("Stored: %v", err)
	}
	var parts []string
	for _, v := range got {
		kind := "orphan"
		switch {
		case v.Current:
			kind = "current"
		case v.Published:
			kind = "retained"
		}
		parts = append(parts, v.Version+":"+kind)
	}
	return strings.Join(parts, " "), got
}

// TestStoredReplace: the retained and current run tables are listed as
// published, a killed run's (prepared, a shard committed, never staged,
// published or aborted) as not; Abort with only the version drops it. A
// user's table named like a run table is never listed nor dropped.
func TestStoredReplace(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeReplace, "preds")
	defer s.Close()
	ctx := context.Background()
	if sum, _ := storedSummary(t, s); sum != "" {
		t.Fatalf("Stored before any run = %q, want nothing", sum)
	}
	for _, v := range []string{"v1", "v2", "v3"} {
		run := sinktest.NewRun(v, false, nil)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		writeRows(t, s, run, 0, 0, 5, true)
		publish(t, s, run)
	}
	killed := sinktest.NewRun("v4", false, nil)
	if err := s.Prepare(ctx, killed); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, killed, 0, 0, 7, true)
	pg.Exec(t, fmt.Sprintf("CREATE TABLE %s (x int)", s.ident("preds__v9")))
	pg.Exec(t, fmt.Sprintf("CREATE TABLE %s (x int)", s.ident("mine")))

	sum, got := storedSummary(t, s)
	if sum != "v2:retained v3:current v4:orphan" {
		t.Fatalf("Stored = %q, want v2:retained v3:current v4:orphan", sum)
	}
	if w := got[2].What; !strings.Contains(w, s.schema+".preds__v4") {
		t.Errorf("orphan described as %q, want its table named", w)
	}
	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v4"}); err != nil {
		t.Fatalf("Abort(v4) without schema or run id: %v", err)
	}
	if sum, _ := storedSummary(t, s); sum != "v2:retained v3:current" {
		t.Fatalf("after Abort Stored = %q, want v2:retained v3:current", sum)
	}
	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v3"}); err == nil {
		t.Fatal("Abort of the current version succeeded")
	}
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('preds__v9', 'mine', 'preds__v2', 'preds__v3')", s.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("%d of the user's and the published tables remain, want 4", n)
	}
}

// TestStoredUpsert: a killed upsert run leaves a staging table, listed as
// not published; a published run's staging table is gone and the target
// table is nobody's version.
func TestStoredUpsert(t *testing.T) {
	t.Parallel()
	pg := testservers.Postgres(t)
	s := newSink(t, pg, ModeUpsert, "preds")
	defer s.Close()
	ctx := context.Background()
	done := sinktest.NewRun("v1", false, map[string]string{"date": "2024-11-01"})
	if err := s.Prepare(ctx, done); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, done, 0, 0, 5, true)
	publish(t, s, done)
	killed := sinktest.NewRun("v2", false, map[string]string{"date": "2024-11-02"})
	if err := s.Prepare(ctx, killed); err != nil {
		t.Fatal(err)
	}
	writeRows(t, s, killed, 0, 0, 5, true)
	sum, got := storedSummary(t, s)
	if sum != "v2:orphan" || !strings.Contains(got[0].What, "staging table") {
		t.Fatalf("Stored = %q %v, want v2:orphan, a staging table", sum, got)
	}
	if err := s.Abort(ctx, sinks.RunInfo{Job: testJob, Version: "v2", Params: killed.Params}); err != nil {
		t.Fatal(err)
	}
	if sum, _ := storedSummary(t, s); sum != "" {
		t.Fatalf("after Abort Stored = %q, want nothing", sum)
	}
	if rows := upsertRows(t, s, done, "2024-11-01"); len(rows) != 5 {
		t.Fatalf("published partition has %d rows after Abort of another run, want 5", len(rows))
	}
}
