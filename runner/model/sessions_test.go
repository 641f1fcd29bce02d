package model

import (
	"runtime"
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// TestPlanSessions: set sessions are kept; auto gives a CPU model two
// half-width sessions, a GPU model two (streams), and one core or a large
// model one.
func TestPlanSessions(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	cases := []struct {
		name  string
		spec  jobs.ModelSpec
		bytes int
		want  sessionPlan
	}{
		{"set", jobs.ModelSpec{Sessions: 3, Device: "cpu"}, 1 << 20, sessionPlan{3, 0}},
		{"set with threads", jobs.ModelSpec{Sessions: 1, Threads: 2, Device: "cpu"}, 1 << 20, sessionPlan{1, 2}},
		{"auto", jobs.ModelSpec{Device: "cpu"}, 1 << 20, sessionPlan{2, 4}},
		{"auto, threads set", jobs.ModelSpec{Threads: 3, Device: "cpu"}, 1 << 20, sessionPlan{2, 3}},
		{"auto, gpu", jobs.ModelSpec{Device: "cuda:0"}, 1 << 20, sessionPlan{gpuSessions, 0}},
		{"auto, gpu, large model", jobs.ModelSpec{Device: "cuda:0"}, autoSessionMaxBytes + 1, sessionPlan{1, 0}},
		{"auto, large model", jobs.ModelSpec{Device: "cpu"}, autoSessionMaxBytes + 1, sessionPlan{1, 0}},
	}
	for _, c := range cases {
		if got := planSessions(c.spec, c.bytes); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	runtime.GOMAXPROCS(1)
	if got := planSessions(jobs.ModelSpec{Device: "cpu"}, 1<<20); got != (sessionPlan{1, 0}) {
		t.Errorf("one core: %+v, want one session", got)
	}
}
