package profile

import (
	"fmt"
	"sort"

	"github.com/precog-ml/precog/jobs"
)

// Check is one evaluated check, as `status --json` shows it.
type Check struct {
	Name string `json:"name"`
	// Value is what was measured; Threshold the bound it was held to (a
	// number, or [lo, hi] for a range).
	Value     float64 `json:"value"`
	Threshold any     `json:"threshold"`
	Passed    bool    `json:"passed"`
	// Error states the sample's statistical error, for checks estimated
	// from the key sample.
	Error string `json:"error,omitempty"`
	// Note says why a check could not be evaluated (it then passes).
	Note string `json:"note,omitempty"`
}

// Report is the checks of one run against the version it would replace.
type Report struct {
	// Against is the published version compared with ("" on a first run).
	Against    string `json:"against,omitempty"`
	AgainstRun string `json:"against_run,omitempty"`
	// FirstRun: nothing published to compare with; only absolute bounds
	// (range, null fraction) applied.
	FirstRun bool    `json:"first_run,omitempty"`
	Note     string  `json:"note,omitempty"`
	Checks   []Check `json:"checks"`
	Passed   bool    `json:"passed"`
}

// Failed lists the failed checks as "name value vs threshold".
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, fmt.Sprintf("%s = %.4g (threshold %v)", c.Name, c.Value, c.Threshold))
		}
	}
	return out
}

// Baseline is what a run is checked against: the published version's
// profile and rows, or nothing on a first run.
type Baseline struct {
	RunID, Version string
	RowsOut        int64
	Profile        *Profile
}

// Evaluate runs spec's checks on the new profile (rowsOut rows) against
// base (nil: a first run, only absolute bounds apply).
func Evaluate(spec *jobs.ChecksSpec, base *Baseline, cur *Profile, rowsOut int64) Report {
	r := Report{Checks: []Check{}}
	if base == nil {
		r.FirstRun = true
		r.Note = "first run of this job and target: nothing published to compare with; only absolute bounds (range, max_null_fraction) apply"
	} else {
		r.Against, r.AgainstRun = base.Version, base.RunID
	}
	add := func(c Check) { r.Checks = append(r.Checks, c) }
	if spec == nil {
		r.Passed = true
		return r
	}
	if rc := spec.Rows; rc != nil && base != nil {
		ratio := 0.0
		if base.RowsOut > 0 {
			ratio = float64(rowsOut) / float64(base.RowsOut)
		}
		if rc.MinRatio != nil {
			add(Check{Name: "rows.min_ratio", Value: ratio, Threshold: *rc.MinRatio, Passed: ratio >= *rc.MinRatio})
		}
		if rc.MaxRatio != nil {
			add(Check{Name: "rows.max_ratio", Value: ratio, Threshold: *rc.MaxRatio, Passed: ratio <= *rc.MaxRatio})
		}
	}
	if kc := spec.KeyChurn; kc != nil && kc.Max != nil && base != nil {
		e := Churn(base.Profile, cur)
		add(Check{Name: "key_churn.max", Value: e.Mean, Threshold: *kc.Max, Passed: e.Mean <= *kc.Max, Error: e.String()})
	}
	fields := make([]string, 0, len(spec.Outputs))
	for f := range spec.Outputs {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	for _, name := range fields {
		oc := spec.Outputs[name]
		f := cur.Fields[name]
		if f == nil {
			f = newField()
		}
		p := "outputs." + name + "."
		if oc.MaxNullFraction != nil {
			frac := 0.0
			if f.Rows > 0 {
				frac = float64(f.Nulls) / float64(f.Rows)
			}
			add(Check{Name: p + "max_null_fraction", Value: frac, Threshold: *oc.MaxNullFraction, Passed: frac <= *oc.MaxNullFraction})
		}
		if len(oc.Range) == 2 {
			lo, hi := oc.Range[0], oc.Range[1]
			c := Check{Name: p + "range", Threshold: []float64{lo, hi}, Passed: true}
			if f.Values > 0 {
				c.Passed = f.Min >= lo && f.Max <= hi
				c.Value = f.Max
				if f.Min < lo {
					c.Value = f.Min
				}
				c.Note = fmt.Sprintf("min %g, max %g", f.Min, f.Max)
			} else {
				c.Note = "no values"
			}
			add(c)
		}
		if base == nil {
			continue
		}
		bf := base.Profile.Fields[name]
		if oc.MaxPSI != nil {
			c := Check{Name: p + "max_psi", Threshold: *oc.MaxPSI, Passed: true}
			if bf == nil {
				c.Note = "the published version has no profile of this field"
			} else if psi, err := PSI(bf, f); err != nil {
				c.Note = err.Error()
			} else {
				c.Value, c.Passed = psi, psi <= *oc.MaxPSI
				c.Error = fmt.Sprintf("deciles from sketches of %.0f%% relative accuracy", RelativeAccuracy*100)
			}
			add(c)
		}
		if oc.MinOverlapAtK != nil {
			add(minCheck(p+"min_overlap_at_k", OverlapAtK(base.Profile, cur, name), *oc.MinOverlapAtK))
		}
		if oc.MinCosine != nil {
			add(minCheck(p+"min_cosine", Cosine(base.Profile, cur, name), *oc.MinCosine))
		}
	}
	r.Passed = true
	for _, c := range r.Checks {
		r.Passed = r.Passed && c.Passed
	}
	return r
}

// SampleFields are the fields whose values the key sample must keep for
// spec's same-key checks.
func SampleFields(spec *jobs.ChecksSpec) []string {
	if spec == nil {
		return nil
	}
	var out []string
	for name, oc := range spec.Outputs {
		if oc.MinOverlapAtK != nil || oc.MinCosine != nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// minCheck is a check that an estimate over the keys sampled in both
// versions is at least least; with no such key it passes, saying so.
func minCheck(name string, e Estimate, least float64) Check {
	c := Check{Name: name, Value: e.Mean, Threshold: least, Passed: e.N == 0 || e.Mean >= least, Error: e.String()}
	if e.N == 0 {
		c.Note = "no sampled key in both versions"
	}
	return c
}
