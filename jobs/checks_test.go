package jobs

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestChecksValid: a checks block parses, output keys are normalised to the
// stored field name and defaults apply.
func TestChecksValid(t *testing.T) {
	y := baseSpec + "checks:\n  rows: { min_ratio: 0.7 }\n  outputs:\n    score: { max_psi: 0.2, range: [-1, 1.5] }\n"
	s, err := Parse([]byte(y), "job.yaml", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Checks
	if c.OnFailure != "hold" || !c.Hold() || c.Sample() != DefaultCheckSample {
		t.Errorf("defaults: on_failure %q sample %d", c.OnFailure, c.Sample())
	}
	if *c.Rows.MinRatio != 0.7 || c.Rows.MaxRatio != nil {
		t.Errorf("rows: %+v", c.Rows)
	}
	if oc := c.Outputs["score"]; *oc.MaxPSI != 0.2 || oc.Range[0] != -1 || oc.Range[1] != 1.5 {
		t.Errorf("outputs: %+v", c.Outputs)
	}
	// Without checks the spec hash is what it was before the field existed.
	plain, err := Parse([]byte(baseSpec), "job.yaml", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mustMarshal(t, plain)), "\nchecks:") {
		t.Error("a spec without checks marshals a checks field")
	}
	if plain.Hash() == s.Hash() {
		t.Error("checks do not change the spec hash")
	}
}

// TestChecksErrors: each bad checks block gives one problem naming the field.
func TestChecksErrors(t *testing.T) {
	cases := []struct{ block, field, msg string }{
		{"checks: { rows: { min_ratio: 0 } }", "checks.rows.min_ratio", "positive"},
		{"checks: { rows: { max_ratio: -2 } }", "checks.rows.max_ratio", "positive"},
		{"checks: { rows: { min_ratio: 1.5, max_ratio: 1.2 } }", "checks.rows", "above max_ratio"},
		{"checks: { rows: {} }", "checks.rows", "min_ratio, max_ratio"},
		{"checks: { rows: { min: 1 } }", "checks.rows.min", "unknown field"},
		{"checks: { key_churn: { max: 1.5 } }", "checks.key_churn.max", "between 0 and 1"},
		{"checks: { key_churn: {} }", "checks.key_churn.max", "required"},
		{"checks: { outputs: { nope: { max_psi: 0.2 } } }", "checks.outputs.nope", "not an output"},
		{"checks: { outputs: { score: { range: [1, 0] } } }", "checks.outputs.score.range", "above hi"},
		{"checks: { outputs: { score: { range: [1] } } }", "checks.outputs.score.range", "[lo, hi]"},
		{"checks: { outputs: { score: { max_psi: 0 } } }", "checks.outputs.score.max_psi", "positive"},
		{"checks: { outputs: { score: { max_null_fraction: 2 } } }", "checks.outputs.score.max_null_fraction", "between 0 and 1"},
		{"checks: { outputs: { score: { min_cosine: 1.1 } } }", "checks.outputs.score.min_cosine", "between -1 and 1"},
		{"checks: { outputs: { score: { min_overlap_at_k: -0.1 } } }", "checks.outputs.score.min_overlap_at_k", "between 0 and 1"},
		{"checks: { outputs: { score: { max_pst: 1 } } }", "checks.outputs.score.max_pst", `did you mean "max_psi"`},
		{"checks: { outputs: { score: {} } }", "checks.outputs.score", "no check given"},
		{"checks: { on_failure: retry }", "checks.on_failure", "hold or fail"},
		{"checks: { sample_size: 0 }", "checks.sample_size", "between 1"},
		{"checks: { bogus: 1 }", "checks.bogus", "unknown field"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(baseSpec+c.block+"\n"), "job.yaml", dateParam, nil)
		p := Problems(err)
		if len(p) != 1 || p[0].Field != c.field || !strings.Contains(p[0].Msg, c.msg) {
			t.Errorf("%s: want one problem at %s containing %q, got %v", c.block, c.field, c.msg, err)
		}
	}
}

func mustMarshal(t *testing.T, s *Spec) []byte {
	t.Helper()
	b, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
