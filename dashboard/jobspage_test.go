package dashboard

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// scheduledSpec is a spec a run records: a schedule and a staleness bound.
const scheduledSpec = "name: daily\nschedule: \"15 4 * * *\"\ntimezone: UTC\nmax_staleness: 24h\nsource:\n  parquet: { path: data/x.parquet }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { y: y }\nsinks:\n  redis: { addr: \"${NO_SUCH_SECRET_ADDR}\", namespace: daily }\n"

// wrapped is a ledger behind a struct that embeds it, as cmd/precog's
// openedLedger does: the jobs page must not depend on the dynamic type.
type wrapped struct{ ledger.Store }

// jobRowOf is the <tr> of job on the jobs page.
func jobRowOf(t *testing.T, body, job string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-job="` + regexp.QuoteMeta(job) + `">.*?</tr>`).FindString(body)
	if m == "" {
		t.Fatalf("jobs page has no row of job %s:\n%s", job, body)
	}
	return m
}

// TestJobsPageFromLedger: without --jobs, /jobs lists every job of the
// ledger, with the schedule of the spec its newest run recorded, and the
// last success of a job that succeeded several times, on both ledgers,
// behind a wrapper of the ledger as well.
func TestJobsPageFromLedger(t *testing.T) {
	for name, open := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			l, _ := open(t)
			ctx := context.Background()
			seed(t, l) // jobs recs and scores, whose recorded spec is not a whole spec
			var last jobs.Run
			for i := range 3 {
				r, shards := newRun("daily", 1)
				r.Spec, r.SpecFile = []byte(scheduledSpec), "/jobs/daily.yaml"
				if err := l.CreateRun(ctx, r, shards); err != nil {
					t.Fatal(err)
				}
				commit(t, l, r.ID, "w-a", 10)
				setState(t, l, r.ID, jobs.RunSucceeded, "")
				if i == 2 {
					var err error
					if last, err = l.Run(ctx, r.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			failed := mustCreate(t, l, "daily", 1) // newer than every success
			setState(t, l, failed.ID, jobs.RunFailed, "boom")

			now := last.UpdatedAt.Add(30 * time.Hour)
			for _, src := range []Source{Shared{L: l, Name: "plain"}, Shared{L: wrapped{l}, Name: "wrapped"}} {
				ts := newServer(t, Options{Source: src, Now: func() time.Time { return now }})
				code, body, _ := get(t, ts, "/jobs", token)
				if code != 200 {
					t.Fatalf("%s: /jobs = %d\n%s", src.Where(), code, body)
				}
				row := jobRowOf(t, body, "daily")
				for _, want := range []string{"every day at 04:15", "15 4 * * *", "stale: 30h0m0s old", "(24h0m0s)",
					`datetime="` + last.UpdatedAt.UTC().Format(time.RFC3339), "/runs/" + failed.ID} {
					if !strings.Contains(row, want) {
						t.Errorf("%s: daily's row lacks %q:\n%s", src.Where(), want, row)
					}
				}
				for _, job := range []string{"recs", "scores"} {
					if r := jobRowOf(t, body, job); !strings.Contains(r, "no spec recorded") {
						t.Errorf("%s: row of %s (no whole spec recorded) does not say so:\n%s", src.Where(), job, r)
					}
				}
				if r := jobRowOf(t, body, "scores"); !strings.Contains(r, "h0m0s old") || strings.Contains(r, "never") {
					t.Errorf("%s: scores (succeeded, no bound) shows no age of its last success:\n%s", src.Where(), r)
				}
			}
		})
	}
}
