package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
)

// maxRuns bounds the runs page (newest first).
const maxRuns = 100

// runStates are the filterable states: every state a run's view shows
// (runview's, derived from jobs.RunStates), held and interrupted included.
var runStates = runview.PublicStates()

// runRow is one run as the pages show it; every number is runview's, so
// the pages and `precog status` agree.
type runRow struct {
	runview.Run
	Pct      float64
	PctText  string
	Rate     string
	ETA      string
	Duration string
	Open     bool
	Created  time.Time
	Finished time.Time
	Sched    time.Time
}

func rowOf(v runview.Run, r jobs.Run) runRow {
	row := runRow{Run: v, PctText: "-", Rate: runview.Human(int64(v.RowsPerS)), Open: !r.State.Terminal(), Created: r.CreatedAt}
	if v.RowsTotal > 0 {
		row.Pct = 100 * float64(min(v.RowsDone, v.RowsTotal)) / float64(v.RowsTotal)
		row.PctText = fmt.Sprintf("%.1f%%", row.Pct)
	}
	row.ETA = "-"
	if eta := v.ETA(v.RowsPerS); eta > 0 {
		row.ETA = runview.Duration(eta)
	}
	row.Duration = runview.Duration(time.Duration(v.DurationS * float64(time.Second)))
	if r.State.Terminal() {
		row.Finished = r.UpdatedAt
	}
	if t, err := time.Parse(time.RFC3339, v.ScheduledFor); err == nil {
		row.Sched = t
	}
	return row
}

// withLedger runs fn on the source's ledger, answering 503 with a page
// when it is busy or unreachable.
func (s *Server) withLedger(w http.ResponseWriter, r *http.Request, v viewer, fn func(led ledger.Store) error) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	led, release, err := s.opts.Source.Ledger(ctx)
	if err == nil {
		defer release()
		err = fn(led)
	}
	switch {
	case err == nil:
	case errors.Is(err, ledger.ErrNotFound):
		s.renderError(w, r, v, http.StatusNotFound, "Not found", err.Error())
	case errors.Is(err, ledger.ErrBusy):
		s.renderBusy(w, r, v)
	default:
		s.opts.Logger.Warn("dashboard: ledger read failed", "path", r.URL.Path, "err", err)
		s.renderError(w, r, v, http.StatusServiceUnavailable, "The ledger could not be read", err.Error())
	}
}

// loadRows reads the newest runs, filtered by job and public state.
func loadRows(ctx context.Context, led ledger.Ledger, view viewFunc, job, state string, now time.Time) ([]runRow, error) {
	runs, err := led.Runs(ctx, job, maxRuns)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	rows := make([]runRow, 0, len(runs))
	for _, r := range runs {
		shards, err := led.Shards(ctx, r.ID)
		if err != nil {
			return nil, fmt.Errorf("run %s: shards: %w", r.ID, err)
		}
		v := view(r, shards, now)
		if state != "" && v.State != state {
			continue
		}
		rows = append(rows, rowOf(v, r))
	}
	return rows, nil
}

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request, v viewer) {
	q := r.URL.Query()
	job, state := q.Get("job"), q.Get("state")
	s.withLedger(w, r, v, func(led ledger.Store) error {
		rows, err := loadRows(r.Context(), led, s.view, job, state, s.opts.Now())
		if err != nil {
			return err
		}
		rows, groups, err := groupBackfills(r.Context(), led, rows, s.opts.Now())
		if err != nil {
			return err
		}
		if q.Get("part") == "rows" {
			s.render(w, http.StatusOK, "runrows", rows)
			return nil
		}
		all, err := led.Runs(r.Context(), "", maxRuns)
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		var jobNames []string
		for _, run := range all {
			if !slices.Contains(jobNames, run.Job) {
				jobNames = append(jobNames, run.Job)
			}
		}
		slices.Sort(jobNames)
		part := "/?part=rows&job=" + urlq(job) + "&state=" + urlq(state)
		s.render(w, http.StatusOK, "runs", s.page(v, "Runs", map[string]any{
			"Rows": rows, "Groups": groups, "Job": job, "State": state, "Jobs": jobNames, "States": runStates, "Part": part,
		}))
		return nil
	})
}

// runDetail is everything /runs/{id} shows.
type runDetail struct {
	Row      runRow
	Shards   []shardRow
	Timeline template.HTML
	Through  template.HTML
	Failed   []shardRow
	// Rejects is the ledger's sample of rejected rows (runview's).
	Rejects  []jobs.Reject
	Spec     string
	SpecFile string
	Workers  int
	// Page is the page of Shards shown: a run of more than ShardPageSize
	// shards shows one page at a time (the states' counts are in Row).
	Page Pager
	// FailedMore counts the failed shards left out of Failed.
	FailedMore int
	// BarsShown is how many of the run's shards the timeline draws (the
	// latest ones) when that is not all of them; 0 when it draws all.
	BarsShown int
}

// Bounds of a run page, so that a run of 100,000 shards renders a page of
// a few hundred kilobytes, refreshed every poll, instead of tens of MB.
const (
	// ShardPageSize is the shard table's rows per page.
	ShardPageSize = 500
	// maxFailedRows is the most failed shards listed with their errors.
	maxFailedRows = 200
	// maxBars is the most shards drawn on the timeline (the latest ones).
	maxBars = 1000
)

// Pager is one page of a run's shard table.
type Pager struct {
	N, Of, Total, From, To int
	Prev, Next             int // 0: none
}

func pagerOf(page, total int) Pager {
	pages := max((total+ShardPageSize-1)/ShardPageSize, 1)
	page = min(max(page, 1), pages)
	p := Pager{N: page, Of: pages, Total: total, From: (page - 1) * ShardPageSize, To: min(page*ShardPageSize, total)}
	if page > 1 {
		p.Prev = page - 1
	}
	if page < pages {
		p.Next = page + 1
	}
	return p
}

type shardRow struct {
	jobs.Shard
	Updated time.Time
}

// loadDetail is run id's page (shards page page) at now: its view, with
// what became of a failed cluster run's staged data (runner.StagedView:
// the retry line precog status prints), its shards, errors, rejects and
// charts.
func loadDetail(ctx context.Context, led ledger.Store, view viewFunc, id string, page int, now time.Time) (runDetail, error) {
	run, err := led.Run(ctx, id)
	if err != nil {
		return runDetail{}, fmt.Errorf("run %s: %w", id, err)
	}
	shards, err := led.Shards(ctx, id)
	if err != nil {
		return runDetail{}, fmt.Errorf("run %s: shards: %w", id, err)
	}
	// The spec as recorded keeps ${…} unexpanded, but a credential may be
	// written literally: the view never shows one.
	v, err := runner.StagedView(ctx, led, run, view(run, shards, now))
	if err != nil {
		return runDetail{}, fmt.Errorf("run %s: staged data: %w", id, err)
	}
	d := runDetail{Row: rowOf(v, run), Spec: jobs.RedactSecrets(string(run.Spec)), SpecFile: run.SpecFile}
	workers := map[string]bool{}
	d.Page = pagerOf(page, len(shards))
	for i, sh := range shards {
		sh.Error = jobs.RedactSecrets(sh.Error)
		row := shardRow{Shard: sh, Updated: sh.UpdatedAt}
		if i >= d.Page.From && i < d.Page.To {
			d.Shards = append(d.Shards, row)
		}
		if sh.State == jobs.ShardFailed || sh.Error != "" {
			if len(d.Failed) < maxFailedRows {
				d.Failed = append(d.Failed, row)
			} else {
				d.FailedMore++
			}
		}
		if sh.Worker != "" {
			workers[sh.Worker] = true
		}
	}
	d.Workers = len(workers)
	if d.Rejects, err = runner.RejectSample(ctx, led, d.Row.Run); err != nil {
		return runDetail{}, err
	}
	d.Timeline, d.BarsShown = timelineSVG(run, shards, now, maxBars)
	d.Through = throughputSVG(run, shards, now)
	return d, nil
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request, v viewer) {
	id := r.PathValue("id")
	s.withLedger(w, r, v, func(led ledger.Store) error {
		page := pageParam(r)
		d, err := loadDetail(r.Context(), led, s.view, id, page, s.opts.Now())
		if err != nil {
			return err
		}
		if r.URL.Query().Get("part") == "live" {
			s.render(w, http.StatusOK, "runlive", d)
			return nil
		}
		run, err := led.Run(r.Context(), id)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		checks, err := loadChecks(r.Context(), led, run)
		if err != nil {
			return err
		}
		s.render(w, http.StatusOK, "run", s.page(v, "Run "+id, map[string]any{
			"D": d, "Checks": checks, "Note": r.URL.Query().Get("note"), "Part": "/runs/" + urlq(id) + "?part=live" + pageQuery(d.Page),
			"CanCancel": s.opts.Actions.Cancel != nil && d.Row.Open,
			"CanRetry":  s.opts.Actions.Retry != nil && (d.Row.Shards.Failed > 0 || d.Row.State == string(jobs.RunFailed)),
		}))
		return nil
	})
}

func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request, v viewer) {
	q := r.URL.Query()
	s.withLedger(w, r, v, func(led ledger.Store) error {
		rows, err := loadRows(r.Context(), led, s.view, q.Get("job"), q.Get("state"), s.opts.Now())
		if err != nil {
			return err
		}
		out := make([]runview.Run, len(rows))
		for i, row := range rows {
			out[i] = row.Run
		}
		writeJSON(w, out)
		return nil
	})
}

func (s *Server) apiRun(w http.ResponseWriter, r *http.Request, v viewer) {
	s.withLedger(w, r, v, func(led ledger.Store) error {
		d, err := loadDetail(r.Context(), led, s.view, r.PathValue("id"), pageParam(r), s.opts.Now())
		if err != nil {
			return err
		}
		shards := make([]jobs.Shard, len(d.Shards))
		for i, sh := range d.Shards {
			shards[i] = sh.Shard
			shards[i].Plan = nil
		}
		writeJSON(w, map[string]any{"run": d.Row.Run, "shards": shards, "reject_sample": runview.StatusOf(d.Row.Run, d.Rejects).RejectSample,
			"shards_page": map[string]int{"page": d.Page.N, "pages": d.Page.Of, "size": ShardPageSize, "total": d.Page.Total}})
		return nil
	})
}

// action runs a Cancel or Retry of the run or backfill (kind) named in
// the path and goes back to its page (under page) with the outcome (POST,
// redirect, GET), or shows the refusal: 404 for one that does not exist,
// 409 otherwise.
func (s *Server) action(w http.ResponseWriter, r *http.Request, v viewer, kind, page, name string, fn func(context.Context, string) (string, error)) {
	id := r.PathValue("id")
	if fn == nil {
		http.Error(w, name+" is not available on this dashboard", http.StatusNotFound)
		return
	}
	msg, err := fn(r.Context(), id)
	if err != nil {
		s.opts.Logger.Warn("dashboard: "+kind+" "+name+" refused", kind, id, "err", err)
		code := http.StatusConflict
		if errors.Is(err, ledger.ErrNotFound) {
			code = http.StatusNotFound
		}
		s.renderError(w, r, v, code, name+" of "+kind+" "+id+" did not happen", err.Error())
		return
	}
	s.opts.Logger.Info("dashboard: "+kind+" "+name, kind, id, "outcome", msg)
	http.Redirect(w, r, page+urlq(id)+"?note="+urlq(msg), http.StatusSeeOther)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, v viewer) {
	s.action(w, r, v, "run", "/runs/", "Cancel", s.opts.Actions.Cancel)
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request, v viewer) {
	s.action(w, r, v, "run", "/runs/", "Retry", s.opts.Actions.Retry)
}

// page wraps a page's data with what the layout needs.
func (s *Server) page(v viewer, title string, data map[string]any) map[string]any {
	data["Title"] = title
	data["V"] = v
	data["Where"] = s.opts.Source.Where()
	data["PollMS"] = s.opts.Poll.Milliseconds()
	data["HasJobs"] = s.opts.JobsDir != ""
	return data
}

func (s *Server) renderError(w http.ResponseWriter, r *http.Request, v viewer, code int, title, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Query().Get("part") != "" {
		http.Error(w, title+": "+msg, code)
		return
	}
	s.render(w, code, "error", s.page(v, title, map[string]any{"Message": msg, "Retry": code == http.StatusServiceUnavailable}))
}

// renderBusy is the 503 of an embedded ledger another process holds, with
// that process's snapshot of its runs when it wrote one.
func (s *Server) renderBusy(w http.ResponseWriter, r *http.Request, v viewer) {
	const title = "The ledger is busy"
	msg := "A precog run holds " + s.opts.Source.Where() + "; these pages show it again once that run ends (precog run --ui shows a run while it executes). This page retries by itself."
	var snap BusySnapshot
	ok := false
	if s.opts.BusySnapshot != nil {
		snap, ok = s.opts.BusySnapshot()
	}
	if !ok || strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Query().Get("part") != "" {
		s.renderError(w, r, v, http.StatusServiceUnavailable, title, msg)
		return
	}
	age := s.opts.Now().Sub(snap.WrittenAt).Round(100 * time.Millisecond)
	s.render(w, http.StatusServiceUnavailable, "error", s.page(v, title, map[string]any{
		"Message": msg, "Retry": true,
		"Snapshot": map[string]any{"PID": snap.PID, "Age": age.String(), "Runs": snap.Runs},
	}))
}

// render executes a template into a buffer first, so that a failure is a
// clean 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		s.opts.Logger.Error("dashboard: render", "template", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// pageParam is the ?page= of a run page (1 when absent or not a number).
func pageParam(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// pageQuery keeps the page in the live part's URL ("" on page 1).
func pageQuery(p Pager) string {
	if p.N <= 1 {
		return ""
	}
	return "&page=" + strconv.Itoa(p.N)
}
