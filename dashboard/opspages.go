package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
)

// rejectsPerPage is how many rejected rows /runs/{id}/rejects shows a page.
const rejectsPerPage = 200

// workerRow is one worker as /workers shows it.
type workerRow struct {
	ledger.WorkerInfo
	Age, Lease, Up string
}

// workersPage lists the ledger's workers: pool, devices, version, last
// heartbeat, held shards; lost ones marked and their shards expiring.
func (s *Server) workersPage(w http.ResponseWriter, r *http.Request, v viewer) {
	s.withLedger(w, r, v, func(led ledger.Store) error {
		pool := r.URL.Query().Get("pool")
		ws, err := led.ListWorkers(r.Context(), pool)
		if errors.Is(err, ledger.ErrUnsupported) {
			s.render(w, http.StatusOK, "workers", s.page(v, "Workers", map[string]any{"Unsupported": true}))
			return nil
		}
		if err != nil {
			return err
		}
		rows := make([]workerRow, 0, len(ws))
		lost := 0
		for _, x := range ws {
			row := workerRow{WorkerInfo: x, Age: runview.Duration(max(x.HeartbeatAge, time.Millisecond)), Lease: runview.Duration(x.Lease),
				Up: runview.Duration(x.HeartbeatAt.Sub(x.StartedAt) + x.HeartbeatAge)}
			if x.Lost {
				lost++
			}
			rows = append(rows, row)
		}
		s.render(w, http.StatusOK, "workers", s.page(v, "Workers", map[string]any{"Rows": rows, "Pool": pool, "Lost": lost}))
		return nil
	})
}

// rejectsPage pages through every rejected row the ledger stores for a
// run (ledger.Rejects), whatever machine ran each shard.
func (s *Server) rejectsPage(w http.ResponseWriter, r *http.Request, v viewer) {
	id := r.PathValue("id")
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	page = max(page, 1)
	s.withLedger(w, r, v, func(led ledger.Store) error {
		run, err := led.Run(r.Context(), id)
		if err != nil {
			return err
		}
		p, err := led.Rejects(r.Context(), id, (page-1)*rejectsPerPage, rejectsPerPage)
		if err != nil {
			return err
		}
		pages := max(int((p.Stored+rejectsPerPage-1)/rejectsPerPage), 1)
		data := map[string]any{"Run": run, "Rows": p.Rows, "Stored": p.Stored, "Cap": p.Cap, "Rejected": run.Counts.Rejected,
			"Page": page, "Pages": pages, "From": (page-1)*rejectsPerPage + 1, "To": (page-1)*rejectsPerPage + len(p.Rows),
			"Truncated": p.Stored < run.Counts.Rejected}
		if page > 1 {
			data["Prev"] = fmt.Sprintf("/runs/%s/rejects?page=%d", urlq(id), page-1)
		}
		if page < pages {
			data["Next"] = fmt.Sprintf("/runs/%s/rejects?page=%d", urlq(id), page+1)
		}
		s.render(w, http.StatusOK, "rejects", s.page(v, "Rejected rows of "+id, data))
		return nil
	})
}
