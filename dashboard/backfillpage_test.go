package dashboard

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// seededBackfill is a backfill of 3 dates: succeeded, failed, pending.
type seededBackfill struct {
	ID                         string
	Succeeded, Failed, Pending string
}

// seedBackfill records a backfill of job "recs" with one run per date in
// the states of seededBackfill.
func seedBackfill(t *testing.T, led ledger.Store) seededBackfill {
	t.Helper()
	ctx := context.Background()
	var add []ledger.BackfillRun
	var ids []string
	for _, d := range []string{"2026-11-01", "2026-11-02", "2026-11-03"} {
		r, shards := newRun("recs", 1)
		r.Params = map[string]string{"date": d}
		r.ParamsKey = jobs.ParamsKey(r.Params)
		add = append(add, ledger.BackfillRun{Value: d, Run: r, Shards: shards})
		ids = append(ids, r.ID)
	}
	b := ledger.Backfill{ID: "recs-bf-" + ids[0], Job: "recs", Param: "date", From: "2026-11-01", To: "2026-11-03", Step: "1d", Parallel: 3, Pool: jobs.DefaultPool}
	if err := led.CreateBackfill(ctx, b, add); err != nil {
		t.Fatal(err)
	}
	s := seededBackfill{ID: b.ID, Succeeded: ids[0], Failed: ids[1], Pending: ids[2]}
	commit(t, led, s.Succeeded, "w-a", 1000)
	setState(t, led, s.Succeeded, jobs.RunSucceeded, "")
	setState(t, led, s.Failed, jobs.RunFailed, "max_rejected_fraction exceeded")
	return s
}

// backfillLedgerActions cancel and retry a backfill on the ledger alone
// (cmd/precog wires precog cancel ID and retry ID).
func backfillLedgerActions(led ledger.Store) BackfillActions {
	bl := led
	return BackfillActions{
		Cancel: func(ctx context.Context, id string) (string, error) {
			b, err := bl.Backfill(ctx, id)
			if err != nil {
				return "", err
			}
			if err := bl.SetBackfill(ctx, id, b.Parallel, true); err != nil {
				return "", err
			}
			for _, d := range b.Dates {
				if r, err := bl.Run(ctx, d.Run()); err == nil && !r.State.Terminal() {
					if err := bl.SetRunState(ctx, r.ID, jobs.RunCancelled, "cancelled from the dashboard"); err != nil {
						return "", err
					}
				}
			}
			return "backfill " + id + " cancelled", nil
		},
		Retry: func(ctx context.Context, id string) (string, error) { return "retried " + id, nil },
	}
}

// TestBackfillPage: the runs page groups a backfill's runs under it (and
// not among the other runs); the backfill page has one cell per date,
// coloured by its run's state and linked to it, with Cancel and Retry that
// call the backfill actions and come back to the page.
func TestBackfillPage(t *testing.T) {
	for name, open := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			led, src := open(t)
			other := mustCreate(t, led, "scores", 1).ID
			s := seedBackfill(t, led)
			ts := newServer(t, Options{Source: src, Actions: ledgerActions(led), BackfillActions: backfillLedgerActions(led)})

			code, body, _ := get(t, ts, "/", token)
			if code != 200 {
				t.Fatalf("GET / = %d\n%s", code, body)
			}
			group := regexp.MustCompile(`(?s)<tbody data-backfill="` + regexp.QuoteMeta(s.ID) + `">(.*?)</tbody>`).FindStringSubmatch(body)
			if group == nil {
				t.Fatalf("runs page has no group of backfill %s:\n%s", s.ID, body)
			}
			for _, id := range []string{s.Succeeded, s.Failed, s.Pending} {
				if !strings.Contains(group[1], `data-run="`+id+`"`) {
					t.Errorf("the backfill's group lacks its run %s", id)
				}
				if strings.Count(body, `data-run="`+id+`"`) != 1 {
					t.Errorf("run %s shown %d times on the runs page, want once (under its backfill)", id, strings.Count(body, `data-run="`+id+`"`))
				}
			}
			if strings.Contains(group[1], other) || !strings.Contains(body, `data-run="`+other+`"`) {
				t.Errorf("the run outside the backfill: in the group or missing")
			}
			if !strings.Contains(group[1], `href="/backfills/`+s.ID+`"`) {
				t.Errorf("the group does not link the backfill page")
			}
			if _, rows, _ := get(t, ts, "/?part=rows", token); strings.Contains(rows, s.Failed) || !strings.Contains(rows, other) {
				t.Errorf("the live rows part mixes the backfill's runs back in:\n%s", rows)
			}

			code, body, _ = get(t, ts, "/backfills/"+s.ID, token)
			if code != 200 {
				t.Fatalf("backfill page = %d\n%s", code, body)
			}
			for date, want := range map[string]string{"2026-11-01": s.Succeeded + `" data-cell="2026-11-01" data-state="succeeded"`,
				"2026-11-02": s.Failed + `" data-cell="2026-11-02" data-state="failed"`, "2026-11-03": s.Pending + `" data-cell="2026-11-03" data-state="pending"`} {
				if !strings.Contains(body, `<a class="bf-cell st-`) || !strings.Contains(body, `href="/runs/`+want) {
					t.Errorf("backfill page: the cell of %s is not %s", date, want)
				}
			}
			if n := strings.Count(body, "data-cell="); n != 3 {
				t.Errorf("backfill page has %d cells, want 3", n)
			}
			for _, want := range []string{"Cancel backfill", "Retry failed and cancelled dates", "max_rejected_fraction exceeded", `data-backfill-state="running"`} {
				if !strings.Contains(body, want) {
					t.Errorf("backfill page lacks %q", want)
				}
			}
			if _, live, _ := get(t, ts, "/backfills/"+s.ID+"?part=live", token); strings.Contains(live, "<html") || strings.Count(live, "data-cell=") != 3 {
				t.Errorf("live part: want the grid without the layout:\n%s", live)
			}

			req, _ := http.NewRequest("POST", ts.URL+"/backfills/"+s.ID+"/cancel", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			nc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := nc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/backfills/"+s.ID+"?note=") {
				t.Fatalf("POST cancel = %d to %q, want 303 back to the backfill page", resp.StatusCode, loc)
			}
			if r, _ := led.Run(context.Background(), s.Pending); r.State != jobs.RunCancelled {
				t.Errorf("after Cancel the pending date's run is %s", r.State)
			}
			_, body, _ = get(t, ts, "/backfills/"+s.ID+"?note=done", token)
			if !strings.Contains(body, `data-cell="2026-11-03" data-state="cancelled"`) || strings.Contains(body, "Cancel backfill") {
				t.Errorf("after Cancel: the cell is not cancelled or Cancel is still offered")
			}
			if code, _, _ := get(t, ts, "/backfills/nope", token); code != 404 {
				t.Errorf("unknown backfill = %d, want 404", code)
			}
		})
	}
}
