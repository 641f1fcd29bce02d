package runner

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	pqsink "github.com/precog-ml/precog/sinks/parquet"
)

// renamedSink is a real Parquet sink under another name whose Rollback to
// one version fails: fault injection around the real sink, not a mock.
type renamedSink struct {
	sinks.Sink
	name   string
	failTo string
}

func (s *renamedSink) Name() string { return s.name }

func (s *renamedSink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	return s.Sink.(sinks.Rollbacker).Versions(ctx, run)
}

func (s *renamedSink) Current(ctx context.Context, run sinks.RunInfo) (string, error) {
	return s.Sink.(sinks.Rollbacker).Current(ctx, run)
}

func (s *renamedSink) Rollback(ctx context.Context, run sinks.RunInfo, version string) error {
	if version == s.failTo {
		return errors.New("injected rollback failure")
	}
	return s.Sink.(sinks.Rollbacker).Rollback(ctx, run, version)
}

// twoVersions publishes two runs of spec into a Parquet sink at out and
// another at out2 (named "second"), and returns both sinks and the
// versions, oldest first.
func twoVersions(t *testing.T, dir string, spec *jobs.Spec) (first sinks.Sink, second *renamedSink, v1, v2 string) {
	t.Helper()
	first = parquetSink(t, spec)
	pq2 := *spec.Sinks.Parquet
	pq2.Path = filepath.Join(dir, "out2")
	s2, err := pqsink.New(spec.Name, pq2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	second = &renamedSink{Sink: s2, name: "second"}
	var versions []string
	for i := range 2 {
		if i > 0 {
			// Versions order by their second: the next run starts in a later one.
			last := time.Now().Truncate(time.Second)
			for deadline := time.Now().Add(3 * time.Second); !time.Now().Truncate(time.Second).After(last) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
		}
		res, err := RunLocal(context.Background(), spec, LocalOptions{StateDir: filepath.Join(dir, "state"), Sinks: []sinks.Sink{first, second}})
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, res.Run.Version)
	}
	return first, second, versions[0], versions[1]
}

func currentOf(t *testing.T, s sinks.Sink, spec *jobs.Spec) string {
	t.Helper()
	cur, err := s.(sinks.Rollbacker).Current(context.Background(), sinks.RunInfo{Job: spec.Name, Params: spec.Params, Key: spec.Source.Key})
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// TestRollbackAllOrNothing: a rollback whose second sink fails moves the
// first back (both stay on the newer version, the error says so); refused
// requests (a version not retained, an unknown sink) are *RefusedError and
// change nothing; a plain rollback moves both sinks to the older version.
func TestRollbackAllOrNothing(t *testing.T) {
	dir, spec := fixture(t, dataset)
	first, second, v1, v2 := twoVersions(t, dir, spec)
	if v1 == v2 {
		t.Fatalf("two runs published one version %s", v1)
	}
	ctx := context.Background()
	snks := []sinks.Sink{first, second}

	second.failTo = v1
	res, err := Rollback(ctx, RollbackParams{Spec: spec, Sinks: snks})
	if err == nil || !strings.Contains(err.Error(), "injected rollback failure") || !strings.Contains(err.Error(), "the sinks already moved were moved back") {
		t.Fatalf("rollback with a failing sink = %v, want its error saying the moved sinks were moved back", err)
	}
	if len(res.Moved) != 1 || res.Moved[0].Name != "parquet" || len(res.MovedBack) != 1 || res.MovedBack[0].Current != v2 {
		t.Errorf("moved %+v, moved back %+v; want parquet moved and moved back to %s", res.Moved, res.MovedBack, v2)
	}
	if c1, c2 := currentOf(t, first, spec), currentOf(t, second, spec); c1 != v2 || c2 != v2 {
		t.Fatalf("after a failed rollback the sinks are on %s and %s, want both on %s", c1, c2, v2)
	}
	second.failTo = ""

	var ref *RefusedError
	for _, p := range []RollbackParams{
		{Spec: spec, Sinks: snks, To: "20000101t000000-dead"},
		{Spec: spec, Sinks: snks, Only: []string{"redis"}},
	} {
		if _, err := Rollback(ctx, p); !errors.As(err, &ref) {
			t.Errorf("Rollback(to %q, only %v) = %v, want a *RefusedError", p.To, p.Only, err)
		}
	}
	res, err = Rollback(ctx, RollbackParams{Spec: spec, Sinks: snks, List: true})
	if err != nil || len(res.Stores) != 2 || !slices.Equal(res.Stores[0].Versions, []string{v2, v1}) || len(res.Moved) != 0 {
		t.Fatalf("list = %+v, %v; want both stores retaining %s, %s and nothing moved", res, err, v2, v1)
	}
	if c1, c2 := currentOf(t, first, spec), currentOf(t, second, spec); c1 != v2 || c2 != v2 {
		t.Fatalf("refused or listing rollbacks moved the sinks to %s and %s", c1, c2)
	}

	res, err = Rollback(ctx, RollbackParams{Spec: spec, Sinks: snks})
	if err != nil || res.Target != v1 || len(res.Moved) != 2 {
		t.Fatalf("rollback = %+v, %v; want both moved to %s", res, err, v1)
	}
	if c1, c2 := currentOf(t, first, spec), currentOf(t, second, spec); c1 != v1 || c2 != v1 {
		t.Errorf("after rollback the sinks are on %s and %s, want %s", c1, c2, v1)
	}
	// Only the second back to the newer version: the first is left.
	res, err = Rollback(ctx, RollbackParams{Spec: spec, Sinks: snks, To: v2, Only: []string{"second"}})
	if err != nil || res.Stores[0].Skipped != SkipNotNamed || len(res.Moved) != 1 {
		t.Fatalf("rollback --sinks second = %+v, %v", res, err)
	}
	if c1, c2 := currentOf(t, first, spec), currentOf(t, second, spec); c1 != v1 || c2 != v2 {
		t.Errorf("after rollback of the second only: %s and %s, want %s and %s", c1, c2, v1, v2)
	}
}
