package main

import (
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
)

// TestBackfillDryRunRefusesWhatBackfillRefuses: a Postgres sink in mode
// replace over several dates (each date's publish would replace the
// view) is refused by the backfill with exit 2, and the dry run, which
// runs the same checks, refuses it with the same error after listing the
// partitions; a missing partition is refused by both too. Before, the dry
// run exited 0 with an estimate.
func TestBackfillDryRunRefusesWhatBackfillRefuses(t *testing.T) {
	dir := workdir(t)
	pg := testservers.Postgres(t)
	body := strings.Replace(rankerSpec, "sinks:\n", "sinks:\n  postgres: { dsn: \""+pg.DSN+"\", table: scores_bf, mode: replace }\n", 1)
	spec := writeSpec(t, dir, "job.yaml", body)
	from, to := usersData.Dates[0], usersData.Dates[len(usersData.Dates)-1]
	const want = "sinks.postgres.mode: replace"
	real := precog(t, dir, "backfill", spec, "--from", from, "--to", to)
	if real.code != 2 || !strings.Contains(real.stderr, want) {
		t.Fatalf("backfill: exit %d, want 2 naming %q\n%s%s", real.code, want, real.stdout, real.stderr)
	}
	dry := precog(t, dir, "backfill", spec, "--from", from, "--to", to, "--dry-run")
	if dry.code != 2 || !strings.Contains(dry.stderr, want) || !strings.Contains(dry.stdout, from+"  found") {
		t.Errorf("backfill --dry-run: exit %d, want 2 naming %q after the partitions\n%s%s", dry.code, want, dry.stdout, dry.stderr)
	}
	// A missing partition: both refuse, the dry run after listing it.
	plain := writeSpec(t, dir, "plain.yaml", rankerSpec)
	real = precog(t, dir, "backfill", plain, "--from", "2026-10-31", "--to", from)
	dry = precog(t, dir, "backfill", plain, "--from", "2026-10-31", "--to", from, "--dry-run")
	if real.code != 2 || dry.code != 2 || !strings.Contains(real.stderr, "partitions missing") || !strings.Contains(dry.stderr, "partitions missing") ||
		!strings.Contains(dry.stdout, "2026-10-31  MISSING") {
		t.Errorf("a missing partition: backfill exit %d, --dry-run exit %d; want 2 for both\n%s\n---\n%s%s", real.code, dry.code, real.stderr, dry.stdout, dry.stderr)
	}
}
