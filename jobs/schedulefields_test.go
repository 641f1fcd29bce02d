package jobs

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const scheduledSpec = "schedule: \"0 */4 * * *\"\n"

func TestScheduleFields(t *testing.T) {
	s, err := Parse([]byte(baseSpec+scheduledSpec+"catchup: all\nmax_catchup: 25\nstarting_deadline: 4h\nmax_staleness: 6h\n"), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Catchup != CatchupAll || s.MaxCatchup != 25 || s.StartingDeadline.Duration != 4*time.Hour || s.MaxStaleness.Duration != 6*time.Hour {
		t.Fatalf("catchup %q max %d deadline %v staleness %v", s.Catchup, s.MaxCatchup, s.StartingDeadline, s.MaxStaleness)
	}
	d, err := Parse([]byte(baseSpec+scheduledSpec), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Catchup != DefaultCatchup || d.MaxCatchup != DefaultMaxCatchup || d.StartingDeadline.Duration != 0 || d.MaxStaleness.Duration != 0 {
		t.Fatalf("defaults: catchup %q max %d deadline %v staleness %v", d.Catchup, d.MaxCatchup, d.StartingDeadline, d.MaxStaleness)
	}
}

func TestScheduleFieldErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{scheduledSpec + "catchup: some\n", `catchup: must be none, latest or all (got "some")`},
		{scheduledSpec + "catchup: all\nmax_catchup: 0\n", "max_catchup: must be between 1 and 1000 (got 0)"},
		{scheduledSpec + "catchup: all\nmax_catchup: 1001\n", "max_catchup: must be between 1 and 1000 (got 1001)"},
		{scheduledSpec + "max_catchup: 5\n", "max_catchup: applies to catchup: all only (catchup is latest)"},
		{scheduledSpec + "starting_deadline: 0s\n", "starting_deadline: must be > 0"},
		{scheduledSpec + "starting_deadline: -1h\n", "starting_deadline: must be > 0"},
		{scheduledSpec + "starting_deadline: 4\n", "starting_deadline: invalid duration"},
		{scheduledSpec + "max_staleness: 0s\n", "max_staleness: must be > 0"},
		{"catchup: none\n", "catchup: applies to scheduled jobs only"},
		{"starting_deadline: 1h\n", "starting_deadline: applies to scheduled jobs only"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(baseSpec+c.yaml), "job.yaml", dateParam, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
	// max_staleness needs no schedule: a manually run job can go stale too.
	if _, err := Parse([]byte(baseSpec+"max_staleness: 6h\n"), "", dateParam, nil); err != nil {
		t.Errorf("max_staleness without a schedule: %v", err)
	}
}

// TestScheduleFieldsHash: spelling out a default changes nothing, so the
// hash of a spec written before these fields existed is unchanged and its
// open runs still resume; a non-default value changes the hash.
func TestScheduleFieldsHash(t *testing.T) {
	hash := func(extra string) string {
		t.Helper()
		s, err := Parse([]byte(baseSpec+scheduledSpec+extra), "", dateParam, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s.Hash()
	}
	plain := hash("")
	s, err := Parse([]byte(baseSpec+scheduledSpec), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"catchup", "max_catchup", "starting_deadline", "max_staleness"} {
		if strings.Contains(string(b), f+":") {
			t.Errorf("the marshalled spec (what Hash covers) holds the defaulted %s:\n%s", f, b)
		}
	}
	if h := hash("catchup: latest\n"); h != plain {
		t.Error("catchup: latest (the default) changed the hash")
	}
	if h := hash("catchup: all\nmax_catchup: 10\n"); h != hash("catchup: all\n") {
		t.Error("max_catchup: 10 (the default) changed the hash")
	}
	for _, extra := range []string{"catchup: none\n", "catchup: all\nmax_catchup: 3\n", "starting_deadline: 1h\n", "max_staleness: 6h\n"} {
		if hash(extra) == plain {
			t.Errorf("%q left the hash unchanged", extra)
		}
	}
}
