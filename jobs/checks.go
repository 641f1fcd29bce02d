package jobs

import (
	"math"
	"strconv"
	"strings"
)

// Checks defaults.
const (
	// DefaultOnFailure: a failed check holds the run (nothing published,
	// staged data kept) for a person to accept or cancel.
	DefaultOnFailure = "hold"
	// DefaultCheckSample is the keys of the deterministic key sample that
	// same-key checks (key_churn, min_overlap_at_k, min_cosine) compare.
	DefaultCheckSample = 2000
	// MaxCheckSample bounds checks.sample_size: the sample is stored in the
	// ledger with each shard and with the published version.
	MaxCheckSample = 100_000
)

// ChecksSpec is the checks: block: what a run must satisfy, compared with
// the currently published version of the same job and target, before any
// sink publishes it. Every key is optional.
type ChecksSpec struct {
	// Rows bounds rows_out as a ratio of the published version's.
	Rows *RowsCheck `yaml:"rows,omitempty"`
	// KeyChurn bounds the share of published keys absent from the new
	// version (estimated from the key sample).
	KeyChurn *KeyChurnCheck `yaml:"key_churn,omitempty"`
	// Outputs maps an output (ONNX output name or stored field name) to its
	// checks. Parsing normalises the key to the stored field name.
	Outputs map[string]OutputCheck `yaml:"outputs,omitempty"`
	// OnFailure is hold (default) or fail.
	OnFailure string `yaml:"on_failure,omitempty"`
	// SampleSize is the keys of the deterministic key sample (the keys
	// with the smallest hashes). Default DefaultCheckSample.
	SampleSize int `yaml:"sample_size,omitempty"`
}

// RowsCheck bounds rows_out / published rows_out.
type RowsCheck struct {
	MinRatio *float64 `yaml:"min_ratio,omitempty"`
	MaxRatio *float64 `yaml:"max_ratio,omitempty"`
}

// KeyChurnCheck bounds the share of published keys missing from the new
// version.
type KeyChurnCheck struct {
	Max *float64 `yaml:"max,omitempty"`
}

// OutputCheck is the checks of one output field.
type OutputCheck struct {
	// MaxPSI bounds the population stability index of the field's values
	// against the published version's (scalars; list elements for lists).
	MaxPSI *float64 `yaml:"max_psi,omitempty"`
	// MaxNullFraction bounds the share of null values. An absolute bound.
	MaxNullFraction *float64 `yaml:"max_null_fraction,omitempty"`
	// Range [lo, hi] bounds every value (every element of a list). An
	// absolute bound.
	Range []float64 `yaml:"range,omitempty"`
	// MinOverlapAtK bounds the mean overlap of a top-k list with the
	// published list of the same key (|new ∩ old| / k).
	MinOverlapAtK *float64 `yaml:"min_overlap_at_k,omitempty"`
	// MinCosine bounds the mean cosine similarity of a vector with the
	// published vector of the same key.
	MinCosine *float64 `yaml:"min_cosine,omitempty"`
}

// Sample returns the key sample size (SampleSize or its default).
func (c *ChecksSpec) Sample() int {
	if c == nil || c.SampleSize <= 0 {
		return DefaultCheckSample
	}
	return c.SampleSize
}

// Hold reports whether a failed check holds the run (rather than failing it).
func (c *ChecksSpec) Hold() bool { return c == nil || c.OnFailure != "fail" }

// validateChecks checks the checks: block against the model's outputs and
// normalises output keys to stored field names.
func (d *decoder) validateChecks(s *Spec) {
	c := s.Checks
	if c == nil {
		return
	}
	switch c.OnFailure {
	case "":
		c.OnFailure = DefaultOnFailure
	case "hold", "fail":
	default:
		d.fail("checks.on_failure", "must be hold or fail (got %q)", c.OnFailure)
	}
	if d.set["checks.sample_size"] && (c.SampleSize < 1 || c.SampleSize > MaxCheckSample) {
		d.fail("checks.sample_size", "must be between 1 and %d (got %d)", MaxCheckSample, c.SampleSize)
	}
	if r := c.Rows; r != nil {
		if r.MinRatio == nil && r.MaxRatio == nil && !d.errUnder("checks.rows") {
			d.fail("checks.rows", "give min_ratio, max_ratio or both")
		}
		d.positive("checks.rows.min_ratio", r.MinRatio)
		d.positive("checks.rows.max_ratio", r.MaxRatio)
		if r.MinRatio != nil && r.MaxRatio != nil && *r.MinRatio > *r.MaxRatio {
			d.fail("checks.rows", "min_ratio %v is above max_ratio %v", *r.MinRatio, *r.MaxRatio)
		}
	}
	if k := c.KeyChurn; k != nil {
		if k.Max == nil && !d.errUnder("checks.key_churn") {
			d.fail("checks.key_churn.max", "required: the largest share of published keys that may be absent, e.g. 0.05")
		} else if k.Max != nil {
			d.fraction("checks.key_churn.max", k.Max)
		}
	}
	// An output is named by its ONNX output name or its stored field name.
	fieldOf := map[string]string{}
	for name, field := range s.Model.Outputs {
		fieldOf[name] = field
		fieldOf[field] = field
	}
	norm := make(map[string]OutputCheck, len(c.Outputs))
	for key, oc := range c.Outputs {
		p := childPath("checks.outputs", key)
		field, ok := fieldOf[key]
		if !ok {
			d.fail(p, "%q is not an output of the model (model.outputs: %v)", key, s.Model.OutputNames())
			continue
		}
		if _, dup := norm[field]; dup {
			d.fail(p, "output field %q is checked twice (by its output name and its field name)", field)
			continue
		}
		if oc.MaxPSI == nil && oc.MaxNullFraction == nil && oc.Range == nil && oc.MinOverlapAtK == nil && oc.MinCosine == nil && !d.errUnder(p) {
			d.fail(p, "no check given: use max_psi, max_null_fraction, range, min_overlap_at_k or min_cosine")
		}
		if oc.MaxPSI != nil && !(*oc.MaxPSI > 0) || oc.MaxPSI != nil && math.IsInf(*oc.MaxPSI, 0) {
			d.fail(p+".max_psi", "must be a positive number (got %v)", *oc.MaxPSI)
		}
		d.fraction(p+".max_null_fraction", oc.MaxNullFraction)
		d.fraction(p+".min_overlap_at_k", oc.MinOverlapAtK)
		if v := oc.MinCosine; v != nil && !(*v >= -1 && *v <= 1) {
			d.fail(p+".min_cosine", "must be between -1 and 1 (got %v)", *v)
		}
		if oc.Range != nil {
			switch {
			case len(oc.Range) != 2:
				d.fail(p+".range", "must be [lo, hi] (got %d values)", len(oc.Range))
			case math.IsNaN(oc.Range[0]) || math.IsNaN(oc.Range[1]):
				d.fail(p+".range", "must be numbers (got %v)", oc.Range)
			case oc.Range[0] > oc.Range[1]:
				d.fail(p+".range", "lo %s is above hi %s", fmtNum(oc.Range[0]), fmtNum(oc.Range[1]))
			}
		}
		norm[field] = oc
	}
	if c.Outputs != nil {
		c.Outputs = norm
	}
}

// positive records a problem unless v is nil or a finite number > 0.
func (d *decoder) positive(path string, v *float64) {
	if v != nil && !(*v > 0 && !math.IsInf(*v, 0)) {
		d.fail(path, "must be a positive number (got %v)", *v)
	}
}

// fraction records a problem unless v is nil or in [0, 1].
func (d *decoder) fraction(path string, v *float64) {
	if v != nil && !(*v >= 0 && *v <= 1) {
		d.fail(path, "must be between 0 and 1 (got %v)", *v)
	}
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// errUnder reports whether a problem was recorded at path or below it (an
// unknown field), so that a derived "nothing given" is not piled on top.
func (d *decoder) errUnder(path string) bool {
	for p := range d.errPath {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}
