package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestParseParams(t *testing.T) {
	got, err := ParseParams([]string{"date=2026-11-01", "region=eu-west.1", "v=a=b"})
	if err != nil {
		t.Fatal(err)
	}
	if got["date"] != "2026-11-01" || got["region"] != "eu-west.1" || got["v"] != "a=b" || len(got) != 3 {
		t.Errorf("got %v", got)
	}
	if got, err := ParseParams(nil); err != nil || len(got) != 0 {
		t.Errorf("no params: %v, %v", got, err)
	}
	bad := []struct{ arg, want string }{
		{"date", `--param "date": expected name=value`},
		{"=x", `--param =x: name must be letters`},
		{"1d=x", `--param 1d=x: name must be letters`},
		{"date=", `--param date=: empty value (pass --param date=VALUE)`},
		{"date=../etc", `value "../etc" must not contain`},
		{"date=a/b", `value "a/b" must not contain`},
		{"date=a\x00b", `must not contain`},
		{"date=a..b", `must not contain`},
		{"date=.", `value "." would name the parent directory`},
		{"date=-rf", `must not start with -`},
		{"date=a b", `may only contain letters, digits and _ . : = -`},
		{"date=" + strings.Repeat("x", 200), `value longer than 128 bytes`},
	}
	for _, b := range bad {
		_, err := ParseParams([]string{b.arg})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ParseParams(%q) = %v, want %q", b.arg, err, b.want)
		}
	}
	if _, err := ParseParams([]string{"d=1", "d=2"}); err == nil || !strings.Contains(err.Error(), "--param d given more than once") {
		t.Errorf("duplicate: %v", err)
	}
	if err := ValidateParam("date", "2026-11-01"); err != nil {
		t.Error(err)
	}
	if err := ValidateParam("date", ".."); err == nil || !strings.HasPrefix(err.Error(), "param date: ") {
		t.Errorf("ValidateParam: %v", err)
	}
}

func TestParamsKey(t *testing.T) {
	if got := ParamsKey(map[string]string{"date": "2026-11-01", "b": "x", "a": "y"}); got != "a=y&b=x&date=2026-11-01" {
		t.Errorf("got %q", got)
	}
	if got := ParamsKey(nil); got != "" {
		t.Errorf("empty: %q", got)
	}
}

func TestHash(t *testing.T) {
	parse := func(y string, params map[string]string) *Spec {
		t.Helper()
		s, err := Parse([]byte(y), "job.yaml", params, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := parse(baseSpec, dateParam)
	h := a.Hash()
	if len(h) != 64 {
		t.Fatalf("hash %q", h)
	}
	// Formatting and comments do not matter, content does.
	reformatted := strings.Replace(baseSpec, "batch_size: 256", "batch_size:    256   # tuned", 1)
	if got := parse(reformatted, dateParam).Hash(); got != h {
		t.Error("hash changed with formatting only")
	}
	if got := parse(strings.Replace(baseSpec, "batch_size: 256", "batch_size: 128", 1), dateParam).Hash(); got == h {
		t.Error("hash unchanged after editing batch_size")
	}
	// The rendered paths depend on the params, so the hash does too.
	if got := parse(baseSpec, map[string]string{"date": "2026-11-02"}).Hash(); got == h {
		t.Error("hash unchanged with another date")
	}
	if got := parse(baseSpec, dateParam).Hash(); got != h {
		t.Error("hash not deterministic")
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"48h": 48 * time.Hour, "90s": 90 * time.Second, "1h30m": 90 * time.Minute, "0": 0, " 5ms ": 5 * time.Millisecond} {
		var d Duration
		if err := yaml.Unmarshal([]byte(`"`+in+`"`), &d); err != nil || d.Duration != want {
			t.Errorf("%q: %v, %v", in, d.Duration, err)
		}
	}
	for _, in := range []string{"2d", "3600", "soon", "[1h]", "{a: 1}"} {
		var d Duration
		err := yaml.Unmarshal([]byte(in), &d)
		if err == nil || !strings.Contains(err.Error(), "duration") {
			t.Errorf("%q: err %v", in, err)
		}
	}
	out, err := yaml.Marshal(struct{ D Duration }{Duration{90 * time.Minute}})
	if err != nil || strings.TrimSpace(string(out)) != "d: 1h30m0s" {
		t.Errorf("marshal: %q, %v", out, err)
	}
}

func TestCheckParams(t *testing.T) {
	s, err := Parse([]byte(baseSpec), "job.yaml", map[string]string{"date": "2026-11-01", "dte": "2026-11-02"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.CheckParams()
	if want := "job.yaml: --param dte: not used by the job spec (it uses: date)"; err == nil || err.Error() != want {
		t.Fatalf("CheckParams = %v, want %q", err, want)
	}
	if p := Problems(err); len(p) != 1 || p[0].Field != "--param dte" {
		t.Errorf("Problems = %v", p)
	}
	s, err = Parse([]byte(baseSpec), "job.yaml", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckParams(); err != nil {
		t.Errorf("every param used: %v", err)
	}
	// A spec without templates uses none: every param is reported.
	plain := strings.Replace(baseSpec, "{{.date}}", "2026", -1)
	s, err = Parse([]byte(plain), "", map[string]string{"b": "1", "a": "2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "--param a: not used by the job spec (it uses: none)\n--param b: not used by the job spec (it uses: none)"
	if err := s.CheckParams(); err == nil || err.Error() != want {
		t.Errorf("CheckParams = %v, want %q", err, want)
	}
}

func TestRedisTTLBounds(t *testing.T) {
	for _, tc := range []struct {
		ttl string
		ok  bool
	}{{"0s", true}, {"1m", true}, {"48h", true}, {"59s", false}, {"1ms", false}} {
		y := baseSpec + "  redis: { addr: x, namespace: recs, ttl: " + tc.ttl + " }\n"
		_, err := Parse([]byte(y), "job.yaml", dateParam, nil)
		if (err == nil) != tc.ok {
			t.Errorf("ttl %s: err = %v, want ok=%v", tc.ttl, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "sinks.redis.ttl: ") {
			t.Errorf("ttl %s: error %v does not name sinks.redis.ttl", tc.ttl, err)
		}
	}
}

func TestDuplicateInputColumns(t *testing.T) {
	y := strings.Replace(baseSpec, "features: { columns: [f0, f1, f2] }", "features: { columns: [f0, f1, f0] }\n    other: { columns: [f1] }", 1)
	s, err := Parse([]byte(y), "job.yaml", dateParam, nil)
	if err != nil {
		t.Fatalf("a column used twice: %v", err)
	}
	if got := s.Model.Inputs["features"].Columns; len(got) != 3 || got[2] != "f0" {
		t.Errorf("columns = %v", got)
	}
}

// TestLoadArgs: --param arguments are parsed (a malformed one refused),
// the spec loaded with them, and a param no template uses refused.
func TestLoadArgs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, []byte(baseSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadArgs(path, []string{"date=2026-11-01", "dte=2026-11-02"}); err == nil || !strings.Contains(err.Error(), "--param dte: not used by the job spec") {
		t.Errorf("LoadArgs with an unused param: %v", err)
	}
	s, err := LoadArgs(path, []string{"date=2026-11-01"})
	if err != nil || s.Params["date"] != "2026-11-01" {
		t.Errorf("LoadArgs = %v, %v; want the spec with date", s, err)
	}
	if _, err := LoadArgs(path, []string{"date"}); err == nil {
		t.Error("a malformed --param was accepted")
	}
	if _, err := LoadArgs(filepath.Join(t.TempDir(), "none.yaml"), nil); err == nil {
		t.Error("a missing spec file loaded")
	}
}
