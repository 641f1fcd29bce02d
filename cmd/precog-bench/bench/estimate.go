package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/precog-ml/precog/internal/testgen"
)

// backfillDates are the estimate section's partitions.
var backfillDates = []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}

var (
	rePartitions = regexp.MustCompile(`(\d+) partitions, (\d+) missing, (\d+) rows`)
	reProbe      = regexp.MustCompile(`probe: (\d+) rows at batch size \d+, (\d+) rows/s`)
	reProbeRuns  = regexp.MustCompile(`probe: (\d+) runs at once, (\d+) rows/s together`)
	reEstimate   = regexp.MustCompile(`estimate: (.*)`)
	reEstOne     = regexp.MustCompile(`estimate: (\S+) on this machine`)
	reEstPar     = regexp.MustCompile(`, (\S+) with --parallel \d+`)
)

// dryRun is what `precog backfill --dry-run` printed.
type dryRun struct {
	rows, probeRows int64
	rate            float64       // the probe's rows/s
	rateRuns        float64       // the probe's rows/s with --parallel runs at once (0: none)
	printed         string        // the estimate line as printed
	one, par        time.Duration // the printed estimates: one run at a time, --parallel runs at once (0: none)
	took            time.Duration
}

// parseDryRun reads the dry run's partition total, probe and estimate lines.
func parseDryRun(out string) (dryRun, error) {
	var d dryRun
	m := rePartitions.FindStringSubmatch(out)
	if m == nil {
		return d, fmt.Errorf("no partition total in the dry run's output:\n%s", out)
	}
	if m[2] != "0" {
		return d, fmt.Errorf("the dry run found %s missing partitions:\n%s", m[2], out)
	}
	d.rows, _ = strconv.ParseInt(m[3], 10, 64)
	p := reProbe.FindStringSubmatch(out)
	if p == nil {
		return d, fmt.Errorf("no probe line in the dry run's output:\n%s", out)
	}
	d.probeRows, _ = strconv.ParseInt(p[1], 10, 64)
	d.rate, _ = strconv.ParseFloat(p[2], 64)
	if r := reProbeRuns.FindStringSubmatch(out); r != nil {
		d.rateRuns, _ = strconv.ParseFloat(r[2], 64)
	}
	if e := reEstimate.FindStringSubmatch(out); e != nil {
		d.printed = e[1]
	}
	if e := reEstOne.FindStringSubmatch(out); e != nil {
		d.one, _ = time.ParseDuration(e[1])
	}
	if e := reEstPar.FindStringSubmatch(out); e != nil {
		d.par, _ = time.ParseDuration(e[1])
	}
	if d.rows == 0 || d.rate == 0 || d.one == 0 {
		return d, fmt.Errorf("the dry run gave %d rows at %v rows/s:\n%s", d.rows, d.rate, out)
	}
	return d, nil
}

// estimate is the wall time the dry run printed for parallel dates at
// once (start-up, stage and the sinks' writes included).
func (d dryRun) estimate(parallel int) time.Duration {
	if parallel > 1 && d.par > 0 {
		return d.par
	}
	return d.one
}

// estimate is issue 20's section: `precog backfill --dry-run`'s estimate
// against the wall time of the same backfill.
func (h *harness) estimate(ctx context.Context) (*section, error) {
	s := &section{Title: fmt.Sprintf("Backfill estimate: `precog backfill --dry-run` vs the same backfill's wall time (%d dates into Parquet, one sink path per date)", len(backfillDates))}
	for _, c := range []struct {
		model    string
		rows     int64
		parallel int
	}{
		{"ranker", h.cfg.backfillRows, 1},
		{"ranker", h.cfg.backfillRows, 2},
		{"heavy", h.cfg.backfillRows / 20, 1},
	} {
		if err := h.estimateOne(ctx, s, c.model, c.rows, c.parallel); err != nil {
			return s, fmt.Errorf("%s --parallel %d: %w", c.model, c.parallel, err)
		}
	}
	s.note("estimate: the dry run probes the job for about 3 s from the first date's first shards (read, encode, infer, the sink's writes and each shard's commit, into a throwaway version it aborts), adds each date's start-up (source, model, sink prepare) and stage as measured once and the ledger's commits (a synced page write in the state dir, 2 per shard and 6 per date), and divides the range's rows (from Parquet metadata) by the probe's rate, or for --parallel N by the rate of a second probe of N pipelines side by side; the comparison uses the printed estimate (to a tenth of a second below 10 s). Not in it: the process's own start, and the later dates' cold page cache (the probe reads the first date).")
	return s, nil
}

// estimateOne writes a dated dataset of rows rows per date, estimates a
// backfill of it with a dry run and times the backfill itself.
func (h *harness) estimateOne(ctx context.Context, s *section, modelName string, rows int64, parallel int) error {
	tag := fmt.Sprintf("%s-p%d", modelName, parallel)
	data := filepath.Join(h.cfg.work, "backfill-data-"+modelName)
	files := int((rows + rowsPerFile - 1) / rowsPerFile)
	if _, err := os.Stat(data); err != nil {
		t0 := time.Now()
		res, err := testgen.WriteDataset(data, testgen.Dataset{
			Dim: dim, Layout: testgen.LayoutColumns, Writer: testgen.WriterArrow, Codec: testgen.CodecSnappy,
			Dates: backfillDates, Disjoint: true, FilesPerDate: files, RowsPerFile: rows / int64(files), RowsPerGroup: 50_000,
		})
		if err != nil {
			return fmt.Errorf("dataset %s: %w", data, err)
		}
		slog.Info("dataset written", "dir", data, "rows", res.Rows, "files", len(res.Files), "took", time.Since(t0).Round(time.Millisecond))
	}
	spec, err := h.writeSpec("bench-backfill-"+tag, modelName, filepath.Join(data, "dt={{.date}}"), map[string]string{"score": "score"},
		fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(h.cfg.work, "out", "backfill-"+tag, "{{.date}}")))
	if err != nil {
		return err
	}
	state := filepath.Join(h.cfg.work, "state-backfill-"+tag)
	from, to := backfillDates[0], backfillDates[len(backfillDates)-1]
	par := strconv.Itoa(parallel)
	t0 := time.Now()
	out, err := h.precogCmd(ctx, "backfill", spec, "--from", from, "--to", to, "--parallel", par, "--dry-run", "--state-dir", state)
	if err != nil {
		return err
	}
	d, err := parseDryRun(out)
	if err != nil {
		return err
	}
	d.took = time.Since(t0)
	t1 := time.Now()
	if _, err := h.precogCmd(ctx, "backfill", spec, "--from", from, "--to", to, "--parallel", par, "--no-progress", "--state-dir", state); err != nil {
		return err
	}
	wall := time.Since(t1)
	est := d.estimate(parallel)
	ratio := wall.Seconds() / est.Seconds()
	slog.Info("backfill estimate", "case", tag, "estimate", est, "actual", wall, "ratio", ratio)
	s.add(row{
		What: fmt.Sprintf("%s, %d dates × %d rows, --parallel %d: the backfill's wall time (precog) vs the dry run's estimate (raw-limit column)",
			modelName, len(backfillDates), d.rows/int64(len(backfillDates)), parallel),
		Ours: dur(wall), Raw: dur(est), Ratio: fmt.Sprintf("%.2f", ratio),
		Target: "0.50–2.00", Verdict: verdict(ratio >= 0.5 && ratio <= 2),
	})
	s.note("%s --parallel %d: the dry run (%s, probe of %d rows at %s) printed `estimate: %s`; the backfill itself ran %s at %s overall.",
		modelName, parallel, dur(d.took), d.probeRows, rate(d.rate, "rows/s"), d.printed, dur(wall), rate(float64(d.rows)/wall.Seconds(), "rows/s"))
	return nil
}

// precogCmd runs bin/precog with args and returns its stdout; a non-zero
// exit is an error carrying both outputs.
func (h *harness) precogCmd(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, h.cfg.bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, os.Environ()
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("precog %v: %w\n%s%s", args, err, out.String(), tail(errb.String(), 2000))
	}
	return out.String(), nil
}
