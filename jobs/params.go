package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var (
	paramNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	paramValueRE = regexp.MustCompile(`^[A-Za-z0-9_.:=-]+$`)
)

// maxParamValue bounds a param value; params are dates and short labels.
const maxParamValue = 128

// ValidateParam checks one run parameter. Names must be usable in a
// template ({{.name}}); values are rendered into file paths and queries, so
// they are restricted to [A-Za-z0-9_.:=-]+ and may not contain "..".
func ValidateParam(name, value string) error {
	if msg := paramProblem(name, value); msg != "" {
		return fmt.Errorf("param %s: %s", name, msg)
	}
	return nil
}

// paramProblem describes what is wrong with a param, "" when nothing is.
func paramProblem(name, value string) string {
	switch {
	case !paramNameRE.MatchString(name):
		return "name must be letters, digits and _ (not starting with a digit)"
	case value == "":
		return "empty value (pass --param " + name + "=VALUE)"
	case len(value) > maxParamValue:
		return fmt.Sprintf("value longer than %d bytes", maxParamValue)
	case value == ".":
		return `value "." would name the parent directory of a templated path`
	case strings.HasPrefix(value, "-"):
		return fmt.Sprintf("value %q must not start with - (it would read as an option to tools given the path)", value)
	case strings.ContainsAny(value, "/\\\x00") || strings.Contains(value, ".."):
		return fmt.Sprintf("value %q must not contain \"/\", \"\\\", \"..\" or NUL (it is rendered into paths)", value)
	case !paramValueRE.MatchString(value):
		return fmt.Sprintf("value %q may only contain letters, digits and _ . : = -", value)
	}
	return ""
}

// ParseParams turns --param arguments ("date=2026-11-01") into a map,
// refusing malformed, invalid and repeated params.
func ParseParams(args []string) (map[string]string, error) {
	out := make(map[string]string, len(args))
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("--param %q: expected name=value (e.g. --param date=2026-11-01)", a)
		}
		if msg := paramProblem(name, value); msg != "" {
			return nil, fmt.Errorf("--param %s: %s", a, msg)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--param %s given more than once", name)
		}
		out[name] = value
	}
	return out, nil
}

// ParamsKey is the canonical form of a parameter set, "k=v&k=v" sorted by
// name ("" for none): it identifies (job, params) for resume.
func ParamsKey(params map[string]string) string {
	names := sortedKeys(params)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + params[n]
	}
	return strings.Join(parts, "&")
}

// ParamNames returns the names of the run parameters, sorted.
func (s *Spec) ParamNames() []string { return sortedKeys(s.Params) }

// TemplateParams returns the params the spec's templates reference, sorted,
// so that backfill can insist that {{.date}} is used.
func (s *Spec) TemplateParams() []string {
	return append([]string(nil), s.templateParams...)
}

// CheckParams refuses run params that no template of the spec references:
// a misspelt --param (dte=…) would otherwise be accepted silently, and
// stored as an extra output column, while the template's param is missing
// or taken from elsewhere. Each unused param is one *SpecError.
func (s *Spec) CheckParams() error {
	uses := "none"
	if len(s.templateParams) > 0 {
		uses = strings.Join(s.templateParams, ", ")
	}
	var errs []error
	for _, name := range s.ParamNames() {
		if !contains(s.templateParams, name) {
			errs = append(errs, &SpecError{File: s.File, Field: "--param " + name,
				Msg: fmt.Sprintf("not used by the job spec (it uses: %s)", uses)})
		}
	}
	return errors.Join(errs...)
}

// Hash is the sha256 (hex) of the canonical rendered spec, Params and File
// excluded: a run records it so that a resume notices an edited spec.
func (s *Spec) Hash() string {
	b, err := yaml.Marshal(s)
	if err != nil {
		// Not reachable for a Spec (plain fields only); hash the Go
		// representation rather than fail.
		b = fmt.Appendf(nil, "%#v", *s)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// MaxRejected is the rejected-row fraction beyond which a run fails
// (MaxRejectedFraction, default 0.01).
func (s *Spec) MaxRejected() float64 {
	if s.MaxRejectedFraction == nil {
		return DefaultMaxRejectedFraction
	}
	return *s.MaxRejectedFraction
}

// Location is the time zone schedules and dates are read in (default UTC).
func (s *Spec) Location() (*time.Location, error) {
	if s.Timezone == "" {
		return time.UTC, nil
	}
	return time.LoadLocation(s.Timezone)
}

// InputNames returns the ONNX input names of the spec, sorted, for a stable
// tensor order.
func (m *ModelSpec) InputNames() []string { return sortedKeys(m.Inputs) }

// OutputNames returns the ONNX output names of the spec, sorted; the stored
// field of output o is m.Outputs[o].
func (m *ModelSpec) OutputNames() []string { return sortedKeys(m.Outputs) }

// Kind names the configured source: "parquet", "postgres" or "".
func (src *SourceSpec) Kind() string {
	switch {
	case src.Parquet != nil:
		return "parquet"
	case src.Postgres != nil:
		return "postgres"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkParams reports each invalid param given to Parse.
func (d *decoder) checkParams(params map[string]string) {
	for _, name := range sortedKeys(params) {
		if msg := paramProblem(name, params[name]); msg != "" {
			d.failAt("--param "+name, 0, "%s", msg)
		}
	}
}

// LoadArgs loads the spec at path with --param arguments (ParseParams,
// then Load), refusing a param that no template uses (CheckParams): a
// typo would otherwise run silently.
func LoadArgs(path string, args []string) (*Spec, error) {
	p, err := ParseParams(args)
	if err != nil {
		return nil, err
	}
	spec, err := Load(path, p)
	if err != nil {
		return nil, err
	}
	if err := spec.CheckParams(); err != nil {
		return nil, err
	}
	return spec, nil
}
