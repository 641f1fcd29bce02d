package dashboard

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"slices"
	"strings"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/profile"
	"github.com/precog-ml/precog/runner"
)

// histBins is the bins of a run page's old-vs-new histograms.
const histBins = 24

// checksView is the checks section of a run page: the report its publish
// step stored (what `precog diff RUN` prints), who accepted or discarded a
// held run, and the published version's distribution of every scalar
// output beside this run's.
type checksView struct {
	Report profile.Report
	Held   bool
	// Accepted is who resolved a held run and why (nil: nobody yet).
	Accepted *ledger.Acceptance
	Hists    []histView
	// HistNote says why histograms are missing or partial.
	HistNote string
}

// histView is one scalar output's histograms, drawn in Go.
type histView struct {
	Field string
	SVG   template.HTML
}

// loadChecks reads a run's checks from a ledger that stores them (nil,
// nil when the ledger does not, or the run has no report and is not
// held).
func loadChecks(ctx context.Context, led ledger.Store, run jobs.Run) (*checksView, error) {
	v := &checksView{Held: run.State == jobs.RunHeld}
	rep, ok, err := runner.CheckReport(ctx, led, run.ID)
	switch {
	case err != nil:
		return nil, err
	case ok:
		v.Report = rep
	case !v.Held:
		return nil, nil
	default:
		v.Report.Note = "no checks' report is stored for this run"
	}
	if a, err := led.Acceptance(ctx, run.ID); err == nil {
		v.Accepted = &a
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("run %s: acceptance: %w", run.ID, err)
	}
	cur, err := mergedProfile(ctx, led, run.ID)
	if err != nil {
		v.HistNote = "no histograms: " + err.Error()
		return v, nil
	}
	var old *profile.Profile
	switch {
	case v.Report.AgainstRun == "":
		v.HistNote = "A first run: there is no published version to compare with; the histograms show this run alone."
	default:
		if old, err = baselineProfile(ctx, led, run, v.Report.AgainstRun); err != nil {
			v.HistNote = "The published version's profile is not available (" + err.Error() + "); the histograms show this run alone."
		}
	}
	names := make([]string, 0, len(cur.Fields))
	for name, f := range cur.Fields {
		if !f.List {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		var of *profile.Field
		if old != nil {
			of = old.Fields[name]
		}
		v.Hists = append(v.Hists, histView{Field: name, SVG: histogramSVG(name, profile.Histograms(of, cur.Fields[name], histBins))})
	}
	return v, nil
}

// mergedProfile merges the stored profiles of a run's committed shards.
func mergedProfile(ctx context.Context, led ledger.Store, runID string) (*profile.Profile, error) {
	shards, err := led.Shards(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("run %s: shards: %w", runID, err)
	}
	stored, err := led.ShardProfiles(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("run %s: shard profiles: %w", runID, err)
	}
	merged := profile.New(0)
	n := 0
	for _, s := range shards {
		enc, ok := stored[s.Index]
		if s.State != jobs.ShardCommitted || !ok {
			continue
		}
		p, err := profile.Decode(enc)
		if err != nil {
			return nil, fmt.Errorf("run %s shard %d: %w", runID, s.Index, err)
		}
		if err := merged.Merge(p); err != nil {
			return nil, fmt.Errorf("run %s shard %d: %w", runID, s.Index, err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("run %s has no stored output profile", runID)
	}
	return merged, nil
}

// baselineProfile is the profile of the published version a run was
// checked against: the one stored with that version (its (job, target)'s
// baseline, while it is still the published one), else the merge of that
// run's shard profiles.
func baselineProfile(ctx context.Context, led ledger.Store, run jobs.Run, against string) (*profile.Profile, error) {
	if spec, err := jobs.ParseForView(run.Spec, run.SpecFile, run.Params); err == nil {
		if b, err := led.Baseline(ctx, run.Job, runner.CheckTarget(spec)); err == nil && b.RunID == against && b.Profile != "" {
			if p, err := profile.Decode(b.Profile); err == nil {
				return p, nil
			}
		}
	}
	return mergedProfile(ctx, led, against)
}

// Histogram geometry.
const (
	histW, histH = 480, 150
	histPad      = 22
)

// histogramSVG draws the published version's shares (outlined) and the
// run's (filled) per bin of one output, with the bins' range below.
func histogramSVG(field string, h profile.Histogram) template.HTML {
	if len(h.Edges) < 2 {
		return template.HTML(`<p class="muted">No values.</p>`)
	}
	bins := len(h.Edges) - 1
	top := 0.0
	for _, s := range [][]float64{h.Old, h.New} {
		for _, x := range s {
			top = max(top, x)
		}
	}
	if top == 0 {
		top = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="hist" viewBox="0 0 %d %d" role="img" aria-label="%s: published version vs this run, %d bins from %s to %s">`,
		histW, histH, template.HTMLEscapeString(field), bins, num(h.Edges[0]), num(h.Edges[bins]))
	plotH := float64(histH - histPad)
	bw := float64(histW) / float64(bins)
	bar := func(class string, s []float64) {
		for i, x := range s {
			hgt := plotH * x / top
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s to %s: %.1f%%</title></rect>`,
				class, float64(i)*bw+1, plotH-hgt, bw-2, hgt, num(h.Edges[i]), num(h.Edges[i+1]), 100*x)
		}
	}
	bar("new", h.New)
	bar("old", h.Old)
	fmt.Fprintf(&b, `<text class="tick" x="0" y="%d">%s</text><text class="tick" x="%d" y="%d" text-anchor="end">%s</text></svg>`,
		histH-6, num(h.Edges[0]), histW, histH-6, num(h.Edges[bins]))
	return template.HTML(b.String())
}

func num(x float64) string { return fmt.Sprintf("%.4g", x) }
