package bench

import (
	"bytes"
	"log/slog"
	"testing"
	"time"
)

// TestParseCheckStep reads the runner's "checks evaluated" line as slog's
// text handler writes it (the attributes runner/checks.go logs).
func TestParseCheckStep(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("shard committed", "shard", 3, "took", 5*time.Second)
	log.Info("checks evaluated", "run", "r-1", "passed", true, "against", "v 2 (run r-0)",
		"first_run", false, "checks", 5, "took", 1234*time.Millisecond)
	got, err := parseCheckStep(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	if want := (checkStep{took: 1234 * time.Millisecond, passed: true}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parseCheckStep("level=INFO msg=\"run succeeded\"\n"); err == nil {
		t.Fatal("a log without the check step parsed")
	}
}

// TestParseDryRun reads `precog backfill --dry-run`'s total, probe and
// estimate lines and refuses a range with a missing partition.
func TestParseDryRun(t *testing.T) {
	out := `DATE        PARTITION  ROWS    SHARDS
2026-11-01  found      250000  3
2026-11-02  found      250000  3
2 partitions, 0 missing, 500000 rows
probe: 120000 rows at batch size 1024, 1000000 rows/s (read, encode, infer, write parquet, commit)
probe: start-up 1.2s and stage 40ms per run
probe: 2 runs at once, 1600000 rows/s together (1.6x one run)
estimate: 3s on this machine, 1.75s with --parallel 2 (1.5s to 2.1s at the probe's fastest and slowest third)
`
	d, err := parseDryRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if d.rows != 500000 || d.probeRows != 120000 || d.rate != 1e6 || d.rateRuns != 1.6e6 || d.printed != "3s on this machine, 1.75s with --parallel 2 (1.5s to 2.1s at the probe's fastest and slowest third)" {
		t.Fatalf("parsed %+v", d)
	}
	// The printed estimates, start-up and stage included, not rows/rate.
	if got := d.estimate(2); got != 1750*time.Millisecond {
		t.Fatalf("estimate(2) = %v, want 1.75s as printed", got)
	}
	if got := d.estimate(1); got != 3*time.Second {
		t.Fatalf("estimate(1) = %v, want 3s as printed", got)
	}
	if _, err := parseDryRun("3 partitions, 1 missing, 500000 rows\n"); err == nil {
		t.Fatal("a dry run with a missing partition parsed")
	}
}

// TestTypedList: arrays read back as []any become typed slices for the raw
// CopyFrom; a null element or a scalar is left as it is.
func TestTypedList(t *testing.T) {
	if got, ok := typedList([]any{float32(1), float32(2)}).([]float32); !ok || len(got) != 2 || got[1] != 2 {
		t.Fatalf("float32 list: %#v", typedList([]any{float32(1), float32(2)}))
	}
	if _, ok := typedList([]any{int64(1), nil}).([]any); !ok {
		t.Fatal("a list with a null was converted")
	}
	if got := typedList("x"); got != "x" {
		t.Fatalf("scalar: %#v", got)
	}
}

// TestTitleSkew: the text corpus is length-skewed: most titles short,
// every 10th long.
func TestTitleSkew(t *testing.T) {
	long := 0
	for r := range 1000 {
		if len(title(r)) > 100 {
			long++
		}
	}
	if long != 100 {
		t.Fatalf("%d long titles in 1000, want 100", long)
	}
}
