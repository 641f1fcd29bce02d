package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
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

// TestDryRunEstimateWritesSinksAndLeavesNothing: the dry run's probe
// writes its rows through the spec's Redis sink (the server counts the
// SETs; the probe line names the sink), so the estimate counts the sink's
// writes, and aborts them after: no key of the probe remains in Redis and
// no Parquet file under the sink's path. Before, the probe wrote no sink
// (no SET reached the server; the line said "read, encode, infer").
func TestDryRunEstimateWritesSinksAndLeavesNothing(t *testing.T) {
	rd := testservers.NewRedis(t) // private: its counters and keys are the probe's alone
	t.Setenv("TEST_REDIS_ADDR", rd.Addr)
	t.Setenv("TEST_REDIS_DB", strconv.Itoa(rd.DB))
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", rankerSpec+
		"  redis: { addr: \"${TEST_REDIS_ADDR}\", db: \"${TEST_REDIS_DB}\", namespace: \"probe_scores-{{.date}}\" }\n")
	from, to := usersData.Dates[0], usersData.Dates[len(usersData.Dates)-1]
	dry := precog(t, dir, "backfill", spec, "--from", from, "--to", to, "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "write parquet, redis, commit") || !strings.Contains(dry.stdout, "estimate: ") {
		t.Fatalf("backfill --dry-run: exit %d, want 0 with a probe through parquet and redis\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	ctx := context.Background()
	c := rd.Client(t)
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_set:calls=(\d+)`).FindStringSubmatch(stats)
	if m == nil || m[1] == "0" {
		t.Fatalf("the probe wrote no record to Redis (no SET):\n%s\n%s", stats, dry.stdout)
	}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("after the dry run %d keys remain in Redis (after %s SETs), e.g. %v", len(keys), m[1], keys[:min(5, len(keys))])
	}
	files, _ := filepath.Glob(filepath.Join(dir, "out", "scores", "*", "*", "*.parquet"))
	more, _ := filepath.Glob(filepath.Join(dir, "out", "scores", "*", "*.parquet"))
	if len(files)+len(more) > 0 {
		t.Errorf("after the dry run Parquet files remain: %v", append(files, more...))
	}
}
