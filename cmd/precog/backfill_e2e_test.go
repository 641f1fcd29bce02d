package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestBackfillLedgerRecord: a local backfill is one record of the state
// dir's ledger: runs --backfill lists its runs, status ID its per-date
// table (--json with dates), status RUN --json names the backfill, retry ID
// finds nothing to retry, and --dry-run lists a missing partition with an
// estimate, then refuses the range as the backfill would (exit 2).
func TestBackfillLedgerRecord(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	r := precog(t, dir, "backfill", spec, "--from", "2026-11-01", "--to", "2026-11-02", "--parallel", "2")
	if r.code != 0 {
		t.Fatalf("backfill: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	runs := precog(t, dir, "runs", "--backfill", id, "--json")
	var list []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Backfill string `json:"backfill"`
	}
	if err := json.Unmarshal([]byte(runs.stdout), &list); err != nil || len(list) != 2 {
		t.Fatalf("runs --backfill %s --json: %v\n%s\n%s", id, err, runs.stdout, runs.stderr)
	}
	for _, run := range list {
		if run.State != "succeeded" || run.Backfill != id {
			t.Errorf("run %+v, want succeeded in backfill %s", run, id)
		}
	}
	st := precog(t, dir, "status", id, "--json")
	var view struct {
		ID, State string
		RowsDone  int64 `json:"rows_done"`
		Dates     []struct {
			Value, Run, State string
			RowsDone          int64 `json:"rows_done"`
		}
	}
	if err := json.Unmarshal([]byte(st.stdout), &view); err != nil || view.ID != id || view.State != "succeeded" || len(view.Dates) != 2 {
		t.Fatalf("status %s --json: %v\n%s\n%s", id, err, st.stdout, st.stderr)
	}
	var sum int64
	for i, d := range view.Dates {
		if d.Value != usersData.Dates[i] || d.State != "succeeded" || d.RowsDone == 0 {
			t.Errorf("date %d: %+v", i, d)
		}
		sum += d.RowsDone
	}
	if sum != view.RowsDone {
		t.Errorf("rows_done %d, dates sum to %d", view.RowsDone, sum)
	}
	one := precog(t, dir, "status", list[0].ID, "--json")
	if !strings.Contains(one.stdout, `"backfill":"`+id+`"`) {
		t.Errorf("status RUN --json lacks the backfill: %s", one.stdout)
	}
	table := precog(t, dir, "status", id)
	if table.code != 0 || !strings.Contains(table.stdout, "VALUE") || !strings.Contains(table.stdout, usersData.Dates[1]) {
		t.Errorf("status %s: exit %d\n%s%s", id, table.code, table.stdout, table.stderr)
	}
	retry := precog(t, dir, "retry", id)
	if retry.code != 0 || !strings.Contains(retry.stdout, "nothing to retry") {
		t.Errorf("retry %s: exit %d\n%s%s", id, retry.code, retry.stdout, retry.stderr)
	}
	dry := precog(t, dir, "backfill", spec, "--from", "2026-10-31", "--to", "2026-11-02", "--dry-run", "--parallel", "2")
	if dry.code != 2 || !strings.Contains(dry.stderr, "1 of 3 partitions missing") || !strings.Contains(dry.stdout, "2026-10-31  MISSING") || !strings.Contains(dry.stdout, "1 missing") ||
		!strings.Contains(dry.stdout, "estimate: ") || !strings.Contains(dry.stdout, "with --parallel 2") ||
		!regexp.MustCompile(`(?m)^probe: 2 runs at once, \d+ rows/s together`).MatchString(dry.stdout) {
		t.Errorf("--dry-run: exit %d\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
}

// TestValidateEstimate: validate --estimate prints, for one run, the probe
// and estimate lines backfill --dry-run prints for the same partition.
func TestValidateEstimate(t *testing.T) {
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec)
	d := usersData.Dates[0]
	v := precog(t, dir, "validate", spec, "--param", "date="+d, "--estimate")
	dry := precog(t, dir, "backfill", spec, "--from", d, "--to", d, "--dry-run")
	if v.code != 0 || dry.code != 0 {
		t.Fatalf("validate --estimate: exit %d\n%s%s\nbackfill --dry-run: exit %d\n%s%s", v.code, v.stdout, v.stderr, dry.code, dry.stdout, dry.stderr)
	}
	probe := regexp.MustCompile(`(?m)^probe: (\d+ rows at batch size \d+), \d+ rows/s`)
	est := regexp.MustCompile(`(?m)^estimate: \S+ on this machine \((\S+ to \S+ at the probe's fastest and slowest third|no margin: the probe saw \d+ units, too few to compare its thirds)\)$`)
	pv, pd := probe.FindStringSubmatch(v.stdout), probe.FindStringSubmatch(dry.stdout)
	if pv == nil || pd == nil || pv[1] != pd[1] || !est.MatchString(v.stdout) || !est.MatchString(dry.stdout) {
		t.Errorf("validate --estimate and backfill --dry-run differ:\n%s\n---\n%s", v.stdout, dry.stdout)
	}
	if plain := precog(t, dir, "validate", spec, "--param", "date="+d); strings.Contains(plain.stdout, "estimate:") {
		t.Errorf("validate without --estimate probes: %s", plain.stdout)
	}
}
