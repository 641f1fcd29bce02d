package sinktest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/precog-ml/precog/sinks"
)

// testInventory: a sink that lists what it holds (sinks.Inventory, what
// precog gc reads) lists the published version as current and a killed run
// (prepared, a shard committed, never staged nor published) as not
// published; Abort with only the job, params and version removes the
// killed run from the listing, and the current version stays listed and
// readable. Listings of user data a sink must never show are the sinks'
// own tests (they know what a user's table, key or file looks like).
func testInventory(t *testing.T, h Harness, s sinks.Sink) {
	inv, ok := s.(sinks.Inventory)
	if !ok {
		t.Logf("%s does not implement sinks.Inventory: nothing to check", s.Name())
		return
	}
	ctx := ctxT(t)
	var last sinks.RunInfo
	for _, v := range []string{"v1", "v2"} {
		last = NewRun(v, false, params())
		runOf(t, s, last, 0, 20)
	}
	killed := NewRun("v3", false, params())
	prepare(t, s, killed)
	writeShard(t, s, killed, 0, 0, 30)

	target := sinks.RunInfo{Job: killed.Job, Params: killed.Params}
	listing := func() map[string]sinks.StoredVersion {
		t.Helper()
		got, err := inv.Stored(ctx, target)
		if err != nil {
			t.Fatalf("%s: Stored: %v", s.Name(), err)
		}
		byVersion := map[string]sinks.StoredVersion{}
		for _, v := range got {
			if v.Current && !v.Published {
				t.Errorf("%s: version %s listed current but not published", s.Name(), v.Version)
			}
			if old, dup := byVersion[v.Version]; dup {
				// One version may sit in several places (a table and a
				// staging table): it is current or published if any is.
				v.Current, v.Published = v.Current || old.Current, v.Published || old.Published
			}
			byVersion[v.Version] = v
		}
		return byVersion
	}
	got := listing()
	if v := got["v2"]; !v.Current {
		t.Errorf("%s: the published v2 is not listed as current: %s", s.Name(), describe(got))
	}
	if v, ok := got["v3"]; !ok || v.Published {
		t.Errorf("%s: the killed run v3 is not listed as unpublished: %s", s.Name(), describe(got))
	}
	if v, ok := got["v1"]; ok && (v.Current || !v.Published) {
		t.Errorf("%s: the replaced v1 is listed as %+v: a retained version is published, never current", s.Name(), v)
	}

	if err := s.Abort(ctx, sinks.RunInfo{Job: killed.Job, Params: killed.Params, Version: killed.Version}); err != nil {
		t.Fatalf("%s: Abort of the killed run by its version alone: %v", s.Name(), err)
	}
	got = listing()
	if _, ok := got["v3"]; ok {
		t.Errorf("%s: the aborted v3 is still listed: %s", s.Name(), describe(got))
	}
	if v := got["v2"]; !v.Current {
		t.Errorf("%s: after the abort, v2 is not listed as current: %s", s.Name(), describe(got))
	}
	expect(t, h, s, last, "v2", Want(last, 0, 20))
}

func describe(vs map[string]sinks.StoredVersion) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, fmt.Sprintf("%s(published=%v current=%v: %s)", v.Version, v.Published, v.Current, v.What))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}
