package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner/backfill"
)

// BackfillActions are the Cancel and Retry buttons of a backfill page,
// wired by the command to the code of `precog cancel ID` and `precog retry
// ID`. A nil func hides its button. Each returns a message for people.
type BackfillActions struct {
	Cancel func(ctx context.Context, backfillID string) (string, error)
	Retry  func(ctx context.Context, backfillID string) (string, error)
}

// maxGroups bounds the backfills the runs page groups runs under.
const maxGroups = 20

// backfillGroup is a backfill on the runs page with its runs under it.
type backfillGroup struct {
	View backfill.View
	Rows []runRow
}

// groupBackfills moves the rows of runs that belong to one of the newest
// backfills out of rows into one group per backfill (newest first), so
// that the runs page shows a backfill's runs under it.
func groupBackfills(ctx context.Context, led ledger.Store, rows []runRow, now time.Time) ([]runRow, []backfillGroup, error) {
	bfs, err := led.Backfills(ctx, "", maxGroups)
	if err != nil {
		return nil, nil, fmt.Errorf("list backfills: %w", err)
	}
	of := map[string]int{}
	var groups []backfillGroup
	for _, b := range bfs {
		v, _, err := backfill.Status(ctx, led, b.ID, now)
		if err != nil {
			return nil, nil, err
		}
		groups = append(groups, backfillGroup{View: v})
		for _, d := range b.Dates {
			for _, id := range d.Runs {
				if _, seen := of[id]; !seen {
					of[id] = len(groups) - 1
				}
			}
		}
	}
	var flat []runRow
	for _, r := range rows {
		if g, ok := of[r.ID]; ok {
			groups[g].Rows = append(groups[g].Rows, r)
			continue
		}
		flat = append(flat, r)
	}
	groups = slices.DeleteFunc(groups, func(g backfillGroup) bool { return len(g.Rows) == 0 })
	return flat, groups, nil
}

func (s *Server) backfillRoutes() {
	s.mux.Handle("GET /backfills/{id}", s.auth.page(s.backfillPage))
	s.mux.Handle("POST /backfills/{id}/cancel", s.auth.action(func(w http.ResponseWriter, r *http.Request, v viewer) {
		s.action(w, r, v, "backfill", "/backfills/", "Cancel", s.opts.BackfillActions.Cancel)
	}))
	s.mux.Handle("POST /backfills/{id}/retry", s.auth.action(func(w http.ResponseWriter, r *http.Request, v viewer) {
		s.action(w, r, v, "backfill", "/backfills/", "Retry", s.opts.BackfillActions.Retry)
	}))
}

// backfillPage is a backfill in the spirit of Airflow's grid view: one
// cell per value, coloured by its current run's state and linked to it,
// the per-value table of `precog status ID`, and Cancel and Retry.
func (s *Server) backfillPage(w http.ResponseWriter, r *http.Request, v viewer) {
	id := r.PathValue("id")
	s.withLedger(w, r, v, func(led ledger.Store) error {
		view, _, err := backfill.Status(r.Context(), led, id, s.opts.Now())
		if err != nil {
			return fmt.Errorf("backfill %s: %w", id, err)
		}
		if r.URL.Query().Get("part") == "live" {
			s.render(w, http.StatusOK, "backfilllive", view)
			return nil
		}
		retryable := slices.ContainsFunc(view.Dates, func(d backfill.Date) bool {
			return d.State == string(jobs.RunFailed) || d.State == string(jobs.RunCancelled)
		})
		s.render(w, http.StatusOK, "backfill", s.page(v, "Backfill "+id, map[string]any{
			"B": view, "Note": r.URL.Query().Get("note"), "Part": "/backfills/" + urlq(id) + "?part=live",
			"CanCancel": s.opts.BackfillActions.Cancel != nil && !jobs.RunState(view.State).Terminal(),
			"CanRetry":  s.opts.BackfillActions.Retry != nil && retryable,
		}))
		return nil
	})
}
