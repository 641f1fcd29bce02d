package dashboard

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/runview"
)

// Chart geometry (SVG user units; the SVG scales to its container).
const (
	chartW     = 1000
	labelW     = 170
	laneH      = 26
	axisH      = 24
	unclaimed  = "(not claimed yet)"
	throughH   = 160
	sparkW     = 120
	sparkH     = 24
	minBarText = 34 // narrowest bar that gets its "#N" label
)

// bar is one shard attempt on the timeline.
type bar struct {
	shard      jobs.Shard
	start, end time.Time
}

// lanes lays shards out by worker. The ledger keeps a shard's last
// worker, state and update time but not when its attempt started: a bar
// starts where the previous bar of its worker ended (or at the run's
// creation), which is exact for one claim loop per worker name (precog
// names every loop uniquely) and an approximation otherwise. Running bars
// end now; pending shards have no bar.
func lanes(run jobs.Run, shards []jobs.Shard, now time.Time) (names []string, byWorker map[string][]bar) {
	byWorker = map[string][]bar{}
	sorted := slices.Clone(shards)
	slices.SortStableFunc(sorted, func(a, b jobs.Shard) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	for _, sh := range sorted {
		if sh.State == jobs.ShardPending || sh.Worker == "" {
			continue
		}
		lane := byWorker[sh.Worker]
		start := run.CreatedAt
		if n := len(lane); n > 0 && lane[n-1].end.After(start) {
			start = lane[n-1].end
		}
		end := sh.UpdatedAt
		if sh.State == jobs.ShardRunning {
			end = now
		}
		if end.Before(start) {
			end = start
		}
		byWorker[sh.Worker] = append(lane, bar{shard: sh, start: start, end: end})
	}
	for n := range byWorker {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, byWorker
}

// timelineSVG draws one lane per worker with a bar per shard, coloured by
// state and labelled with the shard number (the state is in each bar's
// title and in the shard table, so colour is never the only cue).
//
// At most limit bars are drawn, the latest ones (shown reports how many
// when that is not all): a run of 100,000 shards draws its recent work, not
// 100,000 bars on every refresh. Bars are laid out from every shard first,
// so the ones drawn start where they really do.
func timelineSVG(run jobs.Run, shards []jobs.Shard, now time.Time, limit int) (_ template.HTML, shown int) {
	names, byWorker := lanes(run, shards, now)
	if len(names) == 0 {
		return template.HTML(`<p class="muted">No shard has been claimed yet.</p>`), 0
	}
	if shown = keepLatest(byWorker, limit); shown > 0 {
		// Lanes whose bars all fell out are left out too.
		names = slices.DeleteFunc(names, func(n string) bool { return len(byWorker[n]) == 0 })
	}
	end := now
	if run.State.Terminal() {
		end = run.UpdatedAt
	}
	for _, bs := range byWorker {
		for _, b := range bs {
			if b.end.After(end) {
				end = b.end
			}
		}
	}
	span := max(end.Sub(run.CreatedAt), time.Second)
	x := func(t time.Time) float64 {
		return labelW + float64(chartW-labelW-10)*float64(t.Sub(run.CreatedAt))/float64(span)
	}
	h := axisH + laneH*len(names) + 4
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" viewBox="0 0 %d %d" role="img" aria-label="Shard timeline: %d shards on %d workers over %s">`,
		chartW, h, len(shards), len(names), runview.Duration(span))
	axis(&b, labelW, chartW-10, span, h)
	for i, name := range names {
		y := axisH + i*laneH
		fmt.Fprintf(&b, `<text class="lane" x="4" y="%d">%s</text>`, y+17, template.HTMLEscapeString(clip(name, 22)))
		for _, br := range byWorker[name] {
			x0, x1 := x(br.start), x(br.end)
			w := max(x1-x0, 2)
			sh := br.shard
			fmt.Fprintf(&b, `<g class="bar st-%s" data-bar-shard="%d"><title>shard %d: %s, worker %s, %d rows in, attempt %d, %s%s</title>`,
				sh.State, sh.Index, sh.Index, sh.State, template.HTMLEscapeString(sh.Worker), sh.Counts.RowsIn, sh.Attempts,
				runview.Duration(br.end.Sub(br.start)), spec(sh))
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="2"/>`, x0, y+3, w, laneH-6)
			if w >= minBarText {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d">#%d</text>`, x0+4, y+17, sh.Index)
			}
			b.WriteString(`</g>`)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()), shown
}

// keepLatest trims byWorker to the limit bars that end last; it returns how
// many it kept, 0 when all fit.
func keepLatest(byWorker map[string][]bar, limit int) int {
	var ends []time.Time
	for _, bs := range byWorker {
		for _, b := range bs {
			ends = append(ends, b.end)
		}
	}
	if len(ends) <= limit {
		return 0
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
	cut := ends[limit-1]
	ties := limit // bars ending at cut that may stay
	for _, e := range ends[:limit] {
		if e.After(cut) {
			ties--
		}
	}
	kept := 0
	for w, bs := range byWorker {
		bs = slices.DeleteFunc(bs, func(b bar) bool {
			if b.end.Equal(cut) {
				if ties == 0 {
					return true
				}
				ties--
				return false
			}
			return b.end.Before(cut)
		})
		kept += len(bs)
		byWorker[w] = bs
	}
	return kept
}

func spec(sh jobs.Shard) string {
	if sh.Speculative {
		return " (speculative attempt)"
	}
	return ""
}

// axis draws five ticks of elapsed time along the top.
func axis(b *strings.Builder, x0, x1 int, span time.Duration, h int) {
	for i := 0; i <= 4; i++ {
		x := float64(x0) + float64(x1-x0)*float64(i)/4
		d := time.Duration(float64(span) * float64(i) / 4)
		fmt.Fprintf(b, `<line class="tick" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x, axisH-6, x, h)
		anchor := "middle"
		if i == 4 {
			anchor = "end"
		}
		label := "+" + runview.Duration(d)
		if i == 0 {
			label = "start"
			anchor = "start"
		}
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="13" text-anchor="%s">%s</text>`, x, anchor, label)
	}
}

// throughputSVG draws the rows of committed shards accumulated over time
// (a step per commit): the ledger records commits, not rows in flight.
func throughputSVG(run jobs.Run, shards []jobs.Shard, now time.Time) template.HTML {
	var done []jobs.Shard
	var total int64
	for _, sh := range shards {
		total += sh.EstRows
		if sh.State == jobs.ShardCommitted {
			done = append(done, sh)
		}
	}
	if len(done) == 0 {
		return template.HTML(`<p class="muted">No shard committed yet.</p>`)
	}
	slices.SortFunc(done, func(a, b jobs.Shard) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	end := now
	if run.State.Terminal() {
		end = run.UpdatedAt
	}
	if last := done[len(done)-1].UpdatedAt; last.After(end) {
		end = last
	}
	span := max(end.Sub(run.CreatedAt), time.Second)
	var sum int64
	for _, sh := range done {
		sum += sh.Counts.RowsIn
	}
	top := max(total, sum, 1)
	const plotX0, plotX1, plotY0, plotY1 = 60, chartW - 10, axisH, throughH - 6
	x := func(t time.Time) float64 {
		return plotX0 + (plotX1-plotX0)*float64(t.Sub(run.CreatedAt))/float64(span)
	}
	y := func(n int64) float64 { return plotY1 - (plotY1-plotY0)*float64(n)/float64(top) }
	pts := []string{fmt.Sprintf("%.1f,%.1f", x(run.CreatedAt), y(0))}
	// A step per commit, commits within one tenth of a unit merged: at most
	// about ten thousand points however many shards the run has.
	var acc int64
	for i := 0; i < len(done); {
		px := x(done[i].UpdatedAt)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, y(acc)))
		for ; i < len(done) && x(done[i].UpdatedAt)-px < 0.1; i++ {
			acc += done[i].Counts.RowsIn
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, y(acc)))
	}
	pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(end), y(acc)))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="through" viewBox="0 0 %d %d" role="img" aria-label="Rows committed over time: %s of %s rows in %s">`,
		chartW, throughH, runview.Human(acc), runview.Human(total), runview.Duration(span))
	axis(&b, plotX0, plotX1, span, throughH-6)
	fmt.Fprintf(&b, `<text class="tick" x="4" y="%.1f">%s</text><text class="tick" x="4" y="%.1f">0</text>`, y(top)+4, runview.Human(top), y(0))
	fmt.Fprintf(&b, `<polyline class="line" points="%s"/></svg>`, strings.Join(pts, " "))
	return template.HTML(b.String())
}

// sparkSVG draws durations (oldest first) as a small line.
func sparkSVG(durs []time.Duration) template.HTML {
	if len(durs) < 2 {
		return template.HTML(`<span class="muted">-</span>`)
	}
	top := slices.Max(durs)
	if top <= 0 {
		top = 1
	}
	pts := make([]string, len(durs))
	for i, d := range durs {
		pts[i] = fmt.Sprintf("%.1f,%.1f", float64(sparkW-2)*float64(i)/float64(len(durs)-1)+1, float64(sparkH-2)-float64(sparkH-4)*float64(d)/float64(top))
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="Durations of the last %d runs, longest %s"><polyline class="line" points="%s"/></svg>`,
		sparkW, sparkH, sparkW, sparkH, len(durs), runview.Duration(top), strings.Join(pts, " ")))
}

func clip(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
