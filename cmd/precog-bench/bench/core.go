package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// core is issue 2's section: pipeline throughput against raw ONNX Runtime
// and a raw Parquet scan, peak RSS against dataset size, and resume cost.
func (h *harness) core(ctx context.Context) (*section, error) {
	s := &section{Title: fmt.Sprintf("Core: `precog run` to the Parquet sink (%d rows, batch %d, %d shards of %d rows)",
		h.cfg.rows, batchSize, h.cfg.rows/rowsPerFile, rowsPerFile)}
	data, err := h.dataset(h.cfg.rows)
	if err != nil {
		return s, err
	}
	out := filepath.Join(h.cfg.work, "out")
	parquetSink := func(name string) string {
		return fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(out, name))
	}
	score := map[string]string{"score": "score"}

	// heavy: compute-bound, so the pipeline should run at the model's speed.
	heavyData, err := h.dataset(h.cfg.heavyRow)
	if err != nil {
		return s, err
	}
	heavy, err := h.writeSpec("bench-heavy", "heavy", heavyData, score, parquetSink("heavy"))
	if err != nil {
		return s, err
	}
	// Raw and run alternate three times and each keeps its best: on a
	// shared machine a load spike during one measurement would otherwise
	// decide the ratio (single pairs moved between 0.73 and 1.10).
	var rawHeavy float64
	var st runStats
	var raws []string
	for round := range 3 {
		raw, err := h.rawORT(heavy)
		if err != nil {
			return s, fmt.Errorf("raw ORT heavy: %w", err)
		}
		raws = append(raws, rate(raw, "rows/s"))
		rawHeavy = max(rawHeavy, raw)
		r, err := h.runPrecog(ctx, heavy, filepath.Join(h.cfg.work, fmt.Sprintf("state-heavy-%d", round)), nil)
		if err != nil {
			return s, err
		}
		if r.SummaryRPS > st.SummaryRPS {
			st = r
		}
	}
	s.note("heavy: best of 3 alternating measurements each; raw ORT measured %s.", strings.Join(raws, ", "))
	s.add(atLeast(fmt.Sprintf("heavy (%d rows): run rows/s (summary) vs raw ORT", st.RowsIn), st.SummaryRPS, rawHeavy, "rows/s", 0.90))
	wallRPS := float64(st.RowsIn) / st.Wall.Seconds()
	s.add(atLeast("heavy: run rows/s (whole command's wall time, "+dur(st.Wall)+") vs raw ORT", wallRPS, rawHeavy, "rows/s", 0.90))

	// ranker: a small model, so the read and write stages matter.
	ranker, err := h.writeSpec("bench-ranker", "ranker", data, score, parquetSink("ranker"))
	if err != nil {
		return s, err
	}
	rawRanker, err := h.rawORT(ranker)
	if err != nil {
		return s, fmt.Errorf("raw ORT ranker: %w", err)
	}
	scan, err := rawScan(ctx, data)
	if err != nil {
		return s, fmt.Errorf("raw scan: %w", err)
	}
	full, err := h.runPrecog(ctx, ranker, filepath.Join(h.cfg.work, "state-ranker"), nil)
	if err != nil {
		return s, err
	}
	bound, limit := "raw ORT", rawRanker
	if scan < rawRanker {
		bound, limit = "raw Parquet scan", scan
	}
	r := atLeast(fmt.Sprintf("ranker: run rows/s (summary) vs min(raw ORT %s, raw scan %s) — bound: %s",
		rate(rawRanker, "rows/s"), rate(scan, "rows/s"), bound), full.SummaryRPS, limit, "rows/s", 0.90)
	r.Target = "report"
	r.Verdict = "—"
	s.add(r)
	s.note("stage busy time (busiest first; it bounds the run): ranker %s; heavy %s.", full.Stages, st.Stages)
	s.note("ranker: the pipeline runs read, infer and write as overlapped stages on %d cores; the raw limits run one stage alone, so the slowest stage (%s) bounds the job only if the stages do not compete for the same cores.", nprocs(), bound)
	if full.SummaryRPS < 0.5*limit {
		s.note("ranker: at %.2f of the slower raw stage, neither raw stage bounds this job: the work the raw limits leave out (Arrow → tensor encode, output record assembly, the Parquet sink's encode and compression, shard bookkeeping) does.", full.SummaryRPS/limit)
	}

	// Peak RSS on 1M vs 10M rows: memory is bounded by config, not data.
	// Resume: kill -9 at half the shards, restart, compare with the full
	// run: on the large dataset when there is one, where start-up costs
	// (process, ONNX Runtime, ledger) weigh least against the work.
	if !h.cfg.big {
		s.note("peak RSS on %d rows: %s (the %d-row comparison was skipped: -big=false)", h.cfg.rows, mib(full.MaxRSS), h.cfg.bigRows)
		if err := h.resume(ctx, s, data, h.cfg.rows, score, full); err != nil {
			return s, fmt.Errorf("resume: %w", err)
		}
		return s, nil
	}
	bigData, err := h.dataset(h.cfg.bigRows)
	if err != nil {
		return s, err
	}
	if h.cfg.bigRows != h.cfg.rows {
		defer func() { os.RemoveAll(bigData); delete(h.data, h.cfg.bigRows) }()
	}
	bigSpec, err := h.writeSpec("bench-ranker-big", "ranker", bigData, score, parquetSink("ranker-big"))
	if err != nil {
		return s, err
	}
	big, err := h.runPrecog(ctx, bigSpec, filepath.Join(h.cfg.work, "state-big"), nil)
	if err != nil {
		return s, err
	}
	os.RemoveAll(filepath.Join(out, "ranker-big"))
	s.add(atMost(fmt.Sprintf("peak RSS of run, ranker → parquet: %d rows (precog) vs %d rows (the smaller run in the raw-limit column)", h.cfg.bigRows, h.cfg.rows),
		mib(big.MaxRSS), mib(full.MaxRSS), float64(big.MaxRSS)/float64(full.MaxRSS), 1.2))
	s.note("%d-row run: %s wall, %s (summary); the %d-row run: %s.", h.cfg.bigRows, dur(big.Wall), rate(big.SummaryRPS, "rows/s"), h.cfg.rows, rate(full.SummaryRPS, "rows/s"))
	if err := h.resume(ctx, s, bigData, h.cfg.bigRows, score, big); err != nil {
		return s, fmt.Errorf("resume: %w", err)
	}
	return s, nil
}

// resume runs the ranker job, kills it with SIGKILL once half of its shards
// are committed in the Parquet sink's staging directory, restarts it and
// compares the restarted command's wall time with the full run's.
func (h *harness) resume(ctx context.Context, s *section, data string, rows int64, outputs map[string]string, full runStats) error {
	outDir := filepath.Join(h.cfg.work, "out", "resume")
	spec, err := h.writeSpec("bench-resume", "ranker", data, outputs, fmt.Sprintf("  parquet: { path: %q }\n", outDir))
	if err != nil {
		return err
	}
	shards := int(rows / rowsPerFile)
	staged := filepath.Join(filepath.Dir(outDir), "."+filepath.Base(outDir)+".precog-*", "part-*.parquet")
	committed := func() int {
		m, _ := filepath.Glob(staged)
		return len(m)
	}
	state := filepath.Join(h.cfg.work, "state-resume")
	killed, err := h.runPrecog(ctx, spec, state, func() bool { return committed() >= shards/2 })
	if err != nil {
		return err
	}
	if !killed.Killed {
		return fmt.Errorf("the run finished (%s) before half its shards were seen committed", dur(killed.Wall))
	}
	atKill := committed()
	time.Sleep(100 * time.Millisecond)
	again, err := h.runPrecog(ctx, spec, state, nil)
	if err != nil {
		return err
	}
	recomputed := int64(again.Shards-again.Skipped) * rowsPerFile
	if again.Shards == 0 {
		// Not resumed at all: everything was recomputed.
		recomputed = again.RowsIn
	}
	s.add(atMost(fmt.Sprintf("resume (ranker, %d rows): rows the restart recomputed after kill -9 at %d of %d shards committed, vs a full run", rows, atKill, shards),
		fmt.Sprint(recomputed), fmt.Sprint(rows), float64(recomputed)/float64(rows), 0.55))
	s.add(atMost("resume: the restarted command's wall time vs the full run's (start-up included)",
		dur(again.Wall), dur(full.Wall), again.Wall.Seconds()/full.Wall.Seconds(), 0.55))
	s.note("resume: killed after %s; the restart skipped %d of %d shards; rows out %d.", dur(killed.Wall), again.Skipped, shards, again.RowsOut)
	return nil
}
