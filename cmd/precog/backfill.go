package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
	parquetsrc "github.com/precog-ml/precog/sources/parquet"
)

// backfillFlags are the command line of `precog backfill`.
type backfillFlags struct {
	params        []string
	from, to      string
	step          string
	paramName     string
	parallel      int
	shardParallel int
	noProgress    bool
	force         bool
	db            string
	wait          bool
	dryRun        bool
	priority      int
}

func newBackfillCmd(g *globals) *cobra.Command {
	var f backfillFlags
	cmd := &cobra.Command{
		Use:   "backfill JOB.yaml --from VALUE --to VALUE",
		Short: "Run a job once per date or hour ({{.date}}), each run resumable",
		Long: `Run the job once for every value from --from to --to inclusive, filling the
param named by --param-name (default date) in the spec's templates.

  --step 1d (default): values are dates, YYYY-MM-DD
  --step 1h (or 2h, 6h…): values are hours, YYYY-MM-DDTHH (e.g. 2026-11-01T07)

Before anything runs, every value's spec is loaded and, for a Parquet source,
every partition's path is checked to match files: all the missing ones are
listed in one error (exit 2). A multi-value backfill also refuses sinks whose
publish would replace the previous value's (Postgres mode: replace, Redis
publish: atomic, a Parquet sink path without the param).

--parallel values run at once (default 1), each an ordinary resumable run
recorded in <state-dir>/backfill/<job>/<param>=<value>/. One progress bar
covers the whole range. A failed value does not stop the others: failures are
listed per value at the end and the exit status is 1. The same command after an
interruption skips the values that already succeeded with this exact spec and
model and resumes the interrupted ones. --force recomputes every value.`,
		Example: `  precog backfill jobs/scores.yaml --from 2026-11-01 --to 2026-11-30 --parallel 2
  precog backfill jobs/hourly.yaml --step 1h --from 2026-11-01T00 --to 2026-11-01T23
  precog backfill jobs/events.yaml --param-name dt --from 2026-11-01 --to 2026-11-07`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBackfill(cmd, g, args[0], f)
		},
	}
	cmd.Flags().StringVar(&f.from, "from", "", "first value, YYYY-MM-DD (or YYYY-MM-DDTHH with an hourly --step) (required)")
	cmd.Flags().StringVar(&f.to, "to", "", "last value, inclusive, in the same format (required)")
	cmd.Flags().StringVar(&f.step, "step", "1d", "1d (dates) or Nh (hours, N from 1 to 23)")
	cmd.Flags().StringVar(&f.paramName, "param-name", "date", "the param the values fill ({{.date}}, {{.dt}}…)")
	cmd.Flags().StringArrayVar(&f.params, "param", nil, "other run parameters k=v (repeatable)")
	cmd.Flags().IntVar(&f.parallel, "parallel", 1, "values (dates, hours) run at once")
	cmd.Flags().IntVar(&f.shardParallel, "shard-parallel", 2, "shards processed at once within each run")
	cmd.Flags().BoolVar(&f.noProgress, "no-progress", false, "no progress bar, even on a terminal")
	cmd.Flags().BoolVar(&f.force, "force", false, "recompute values that already succeeded")
	cmd.Flags().BoolVar(&f.wait, "wait", false, "Postgres ledger: follow the backfill until every value ends; exit 1 if one did not succeed")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "list every partition (found or missing, rows and shards from metadata), estimate the wall time and run the backfill's checks (exit 2 where it would refuse the range); run nothing")
	cmd.Flags().IntVar(&f.priority, "priority", 0, "claim priority of the child runs (default: one below the job's priority, below its scheduled refreshes)")
	addDBFlag(cmd, &f.db)
	return cmd
}

func runBackfill(cmd *cobra.Command, g *globals, path string, f backfillFlags) error {
	values, err := valueRange(f.from, f.to, f.step)
	if err != nil {
		return invalid(err)
	}
	if f.parallel < 1 || f.shardParallel < 1 {
		return invalid(fmt.Errorf("--parallel and --shard-parallel must be >= 1 (got %d, %d)", f.parallel, f.shardParallel))
	}
	for _, p := range f.params {
		if name, _, _ := strings.Cut(p, "="); name == f.paramName {
			return invalid(fmt.Errorf("--param %s: set by backfill from --from/--to", f.paramName))
		}
	}
	if f.dryRun {
		return dryRunBackfill(cmd, g, path, f, values)
	}
	specs, err := checkBackfill(path, f, values)
	if err != nil {
		return invalid(err)
	}
	ctx := cmd.Context()
	req := backfill.Request{SpecFile: path, Param: f.paramName, From: values[0], To: values[len(values)-1], Step: f.step,
		Parallel: f.parallel, Force: f.force}
	if cmd.Flags().Changed("priority") {
		req.Priority = &f.priority
	}
	byValue := map[string]*jobs.Spec{}
	for i, v := range values {
		req.Partitions = append(req.Partitions, backfill.Partition{Value: v, Spec: specs[i]})
		byValue[v] = specs[i]
	}
	dsn := databaseURL(f.db)
	var led ledger.Store
	if dsn != "" {
		pl, err := openCluster(ctx, dsn, cliLedgerOptions(g.log))
		if err != nil {
			return err
		}
		led = pl
	} else {
		release, err := runner.LockJob(g.stateDir, specs[0].Name)
		if err != nil {
			return err
		}
		defer release()
		bl, err := open.Open(ctx, open.Location{StateDir: g.stateDir}, open.Options{})
		if err != nil {
			return err
		}
		led = bl
	}
	defer led.Close()
	out, err := backfill.Ensure(ctx, led, req)
	var open *ledger.OpenRunError
	if errors.As(err, &open) {
		return invalid(err)
	} else if err != nil {
		return err
	}
	b := out.Backfill
	fmt.Fprintln(cmd.OutOrStdout(), b.ID)
	g.log.Info("backfill", "id", b.ID, "values", len(values), "new_runs", out.Created, "done_before", out.Skipped, "open", out.Open, "resumed", out.Resumed, "parallel", f.parallel)
	if dsn != "" {
		if !f.wait {
			return nil
		}
		return waitBackfill(ctx, led, b.ID, os.Stderr, !f.noProgress, g)
	}
	g.runningJob()
	// Other processes see the backfill through a snapshot while this one
	// holds the embedded ledger (snapshot.go).
	snaps := startSnapshots(ctx, led, g.log)
	defer snaps.Stop()
	led = kickingLedger{Store: led, s: snaps}
	bar := newProgressBar(os.Stderr, !f.noProgress, g.log)
	agg := newRangeProgress(f.paramName, values, time.Now())
	start := time.Now()
	vr := backfill.RunLocal(ctx, led, b, byValue, backfill.LocalOptions{
		StateDir: g.stateDir, Parallel: f.parallel, ShardParallel: f.shardParallel, Logger: g.log,
		OnProgress:    func(v string, p runner.Progress) { bar.update(agg.update(v, p, time.Now())) },
		ProgressEvery: bar.every(),
	})
	bar.finish()
	results := make([]rangeResult, len(vr))
	for i, r := range vr {
		results[i] = rangeResult{res: r.Res, err: r.Err, started: r.Started}
	}
	return reportRange(cmd.ErrOrStderr(), f.paramName, values, results, time.Since(start))
}

// waitBackfill follows a cluster backfill until every value's run ended:
// one line per change (or a bar on a terminal) with the overall rows and
// ETA. A value that did not succeed is an error (exit 1).
func waitBackfill(ctx context.Context, led backfill.Ledger, id string, w *os.File, progress bool, g *globals) error {
	bar := newProgressBar(w, progress, g.log)
	defer bar.finish()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		v, _, err := backfill.Status(ctx, led, id, time.Now())
		if err != nil {
			return err
		}
		bar.update(runner.Progress{RunID: fmt.Sprintf("backfill %s %s", id, v.State), RowsDone: v.RowsDone, RowsTotal: v.RowsTotal,
			Rejected: v.Rejected, ShardsDone: v.Shards.Committed, ShardsTotal: v.Shards.All(),
			Elapsed: time.Duration(v.DurationS * float64(time.Second)), Rate: v.RowsPerS, ETA: time.Duration(v.ETAS * float64(time.Second))})
		if jobs.RunState(v.State).Terminal() {
			bar.finish()
			_ = v.Table(w)
			if v.State != string(jobs.RunSucceeded) {
				return fmt.Errorf("backfill %s %s: %s", id, v.State, v.Error)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("backfill %s: stopped following (it goes on in the ledger): %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// checkBackfill runs every check the backfill makes before anything runs:
// each value's spec loads, uses the param and every --param, every Parquet
// partition exists, and no sink would keep only the last value. The real
// command and --dry-run both call it, so that a dry run passes exactly
// what the backfill accepts. specs is nil when a spec does not load;
// otherwise it is returned with the other checks' errors, all of them.
func checkBackfill(path string, f backfillFlags, values []string) ([]*jobs.Spec, error) {
	specs, err := loadRangeSpecs(path, f.params, f.paramName, values)
	if err != nil {
		return nil, err
	}
	return specs, errors.Join(missingPartitions(path, f.paramName, values, specs), checkRangePublish(specs, f.paramName, f.parallel))
}

// dryRunBackfill lists every partition (found or missing, rows and shards
// from metadata) and estimates the wall time from a short probe of the
// model on the first found partition's first shard; nothing is recorded.
// It exits 2 with the backfill's own error when the backfill would refuse
// the range (checkBackfill), after the listing.
func dryRunBackfill(cmd *cobra.Command, g *globals, path string, f backfillFlags, values []string) error {
	ctx := cmd.Context()
	specs, refused := checkBackfill(path, f, values)
	if specs == nil {
		return invalid(refused)
	}
	parts := make([]backfill.Partition, len(values))
	for i, v := range values {
		parts[i] = backfill.Partition{Value: v, Spec: specs[i]}
	}
	list, plans := backfill.PlanPartitions(ctx, parts)
	w := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tPARTITION\tROWS\tSHARDS\n", strings.ToUpper(f.paramName))
	var rows int64
	missing := 0
	var probeSpec *jobs.Spec
	found, shards := 0, 0
	for i, p := range list {
		if !p.Found {
			missing++
			fmt.Fprintf(tw, "%s\tMISSING\t-\t-\t%s\n", p.Value, p.Error)
			continue
		}
		rows += p.Rows
		found, shards = found+1, shards+p.Shards
		if probeSpec == nil {
			probeSpec = parts[i].Spec
		}
		fmt.Fprintf(tw, "%s\tfound\t%d\t%d\n", p.Value, p.Rows, p.Shards)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d partitions, %d missing, %d rows\n", len(list), missing, rows)
	if probeSpec != nil {
		if err := printEstimate(ctx, w, estimateParams{Spec: probeSpec, Plans: plans[probeSpec.Params[f.paramName]],
			Rows: rows, Runs: found, Shards: shards, Parallel: f.parallel, StateDir: g.stateDir}); err != nil {
			return err
		}
	}
	if refused != nil {
		return invalid(fmt.Errorf("the backfill would refuse this range: %w", refused))
	}
	if probeSpec == nil {
		return invalid(fmt.Errorf("%s: every partition is missing: nothing to estimate", path))
	}
	g.log.Debug("dry run: the backfill would accept this range", "values", len(values))
	return nil
}

// maxBackfillValues bounds a range typed by mistake (--to 2062-…).
const maxBackfillValues = 3660

// Value layouts: one date per day, or one hour.
const (
	dayLayout  = time.DateOnly
	hourLayout = "2006-01-02T15"
)

// valueRange lists the values from from to to inclusive, every step ("1d",
// or "Nh" with 1 <= N <= 23), formatted with the step's layout.
func valueRange(from, to, step string) ([]string, error) {
	inc, layout, err := parseStep(step)
	if err != nil {
		return nil, err
	}
	want := "YYYY-MM-DD"
	if layout == hourLayout {
		want = "YYYY-MM-DDTHH"
	}
	if from == "" || to == "" {
		return nil, fmt.Errorf("--from and --to are required (%s)", want)
	}
	f, err := time.Parse(layout, from)
	if err != nil {
		return nil, fmt.Errorf("--from %q: want %s for --step %s", from, want, step)
	}
	t, err := time.Parse(layout, to)
	if err != nil {
		return nil, fmt.Errorf("--to %q: want %s for --step %s", to, want, step)
	}
	if t.Before(f) {
		return nil, fmt.Errorf("--to %s is before --from %s", to, from)
	}
	var out []string
	for v := f; !v.After(t); v = inc(v) {
		if len(out) == maxBackfillValues {
			return nil, fmt.Errorf("--from %s --to %s: more than %d values", from, to, maxBackfillValues)
		}
		out = append(out, v.Format(layout))
	}
	return out, nil
}

// parseStep reads --step: the increment and the layout of the values.
func parseStep(step string) (func(time.Time) time.Time, string, error) {
	if step == "1d" {
		return func(t time.Time) time.Time { return t.AddDate(0, 0, 1) }, dayLayout, nil
	}
	var n int
	if _, err := fmt.Sscanf(step, "%dh", &n); err == nil && fmt.Sprintf("%dh", n) == step && n >= 1 && n <= 23 {
		d := time.Duration(n) * time.Hour
		return func(t time.Time) time.Time { return t.Add(d) }, hourLayout, nil
	}
	return nil, "", fmt.Errorf("--step %q: want 1d or Nh (N from 1 to 23)", step)
}

// loadRange loads the spec once per value and checks, before anything
// runs, that the spec uses the param and that every Parquet partition
// exists; all missing partitions are listed in one error.
func loadRange(path string, params []string, name string, values []string) ([]*jobs.Spec, error) {
	specs, err := loadRangeSpecs(path, params, name, values)
	if err != nil {
		return nil, err
	}
	if err := missingPartitions(path, name, values, specs); err != nil {
		return nil, err
	}
	return specs, nil
}

// loadRangeSpecs loads the spec once per value and checks that it uses
// the param and every --param.
func loadRangeSpecs(path string, params []string, name string, values []string) ([]*jobs.Spec, error) {
	specs := make([]*jobs.Spec, len(values))
	for i, v := range values {
		spec, err := loadSpecAnyParams(path, append(slices.Clone(params), name+"="+v))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(spec.TemplateParams(), name) {
			return nil, fmt.Errorf("%s: backfill needs a spec that uses {{.%s}} (it uses: %v); --param-name names another param", path, name, spec.TemplateParams())
		}
		if err := spec.CheckParams(); err != nil {
			return nil, err
		}
		specs[i] = spec
	}
	return specs, nil
}

// missingPartitions lists, in one error, the values whose Parquet
// partition does not exist (nil when all do).
func missingPartitions(path, name string, values []string, specs []*jobs.Spec) error {
	var missing []string
	for i, spec := range specs {
		if p := spec.Source.Parquet; p != nil {
			if _, err := parquetsrc.New(p.Path); err != nil {
				missing = append(missing, fmt.Sprintf("  %s=%s: %v", name, values[i], err))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: %d of %d partitions missing, nothing ran:\n%s", path, len(missing), len(values), strings.Join(missing, "\n"))
	}
	return nil
}

// checkRangePublish refuses, for more than one value, sinks where each
// value's publish replaces the previous one's, so only the last would stay,
// and, for more than one value at once, values that would write the same
// keys in place (they would fail at each other's writer lock): planned here,
// before anything runs. Sinks templated per value (a Parquet path or Redis
// namespace with the param, a Postgres upsert keyed by it) run in parallel.
func checkRangePublish(specs []*jobs.Spec, name string, parallel int) error {
	if len(specs) < 2 {
		return nil
	}
	s := specs[0]
	var errs []error
	if p := s.Sinks.Postgres; p != nil && p.Mode == jobs.PostgresReplace {
		errs = append(errs, fmt.Errorf("sinks.postgres.mode: replace: each %s's run would replace the view %s.%s, leaving only the last one; use mode: upsert (keyed by key and params, every %s kept)", name, p.Schema, p.Table, name))
	}
	if r := s.Sinks.Redis; r != nil && specs[1].Sinks.Redis.Namespace == r.Namespace {
		switch {
		case r.Publish == jobs.RedisPublishAtomic:
			errs = append(errs, fmt.Errorf("sinks.redis.publish: atomic: %s:current is one per namespace, so each %s's publish would replace the previous one; use a namespace per %s (namespace: \"%s-{{.%s}}\"), or publish: in_place", r.Namespace, name, name, r.Namespace, name))
		case parallel > 1:
			errs = append(errs, fmt.Errorf("sinks.redis: every %s writes the same keys of namespace %s in place, so --parallel %d would have them fail at each other's writer lock; use a namespace per %s (namespace: \"%s-{{.%s}}\") to run them in parallel, or --parallel 1 to run them in order", name, r.Namespace, parallel, name, r.Namespace, name))
		}
	}
	if p := s.Sinks.Parquet; p != nil && specs[1].Sinks.Parquet.Path == p.Path {
		errs = append(errs, fmt.Errorf("sinks.parquet.path: %s does not use {{.%s}}, so each %s's output would replace the previous one's", p.Path, name, name))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: cannot backfill %d values into these sinks: %w", s.File, len(specs), errors.Join(errs...))
	}
	return nil
}

// rangeResult is how one value's run ended.
type rangeResult struct {
	res     runner.Result
	err     error
	started bool
}

// reportRange prints one line per value and returns the error the command
// ends with: interrupted (exit 130), some values failed or cancelled (1),
// or nil.
func reportRange(w io.Writer, name string, values []string, results []rangeResult, took time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var failed, cancelled []string
	unfinished := 0
	for i, r := range results {
		v := name + "=" + values[i]
		switch {
		case !r.started:
			unfinished++
			fmt.Fprintf(tw, "%s\tnot started\n", v)
		case errors.Is(r.err, context.Canceled) || errors.Is(r.err, runner.ErrInterrupted):
			unfinished++
			fmt.Fprintf(tw, "%s\tinterrupted (resumes on the same command)\n", v)
		case r.res.Run.State == jobs.RunCancelled:
			cancelled = append(cancelled, v)
			fmt.Fprintf(tw, "%s\tcancelled\trun %s: %s\n", v, r.res.Run.ID, r.res.Run.Error)
		case r.err != nil:
			failed = append(failed, v)
			fmt.Fprintf(tw, "%s\tFAILED\t%v\n", v, r.err)
		case r.res.AlreadyDone:
			fmt.Fprintf(tw, "%s\talready done\trun %s (--force recomputes)\n", v, r.res.Run.ID)
		default:
			c := r.res.Run.Counts
			fmt.Fprintf(tw, "%s\tsucceeded\trun %s, version %s, %d rows in, %d out, %d rejected, %s\n",
				v, r.res.Run.ID, r.res.Run.Version, c.RowsIn, c.RowsOut, c.Rejected, runview.RunDuration(r.res.Run, time.Now()).Round(time.Millisecond))
		}
	}
	tw.Flush()
	switch {
	case unfinished > 0:
		return fmt.Errorf("backfill interrupted (%d of %d values not finished, %d failed): %w", unfinished, len(values), len(failed), context.Canceled)
	case len(failed) > 0:
		return fmt.Errorf("backfill: %d of %d values failed: %s", len(failed), len(values), strings.Join(failed, ", "))
	case len(cancelled) > 0:
		return fmt.Errorf("backfill: %d of %d values cancelled (precog retry BACKFILL runs them again): %s", len(cancelled), len(values), strings.Join(cancelled, ", "))
	}
	fmt.Fprintf(w, "backfill of %d values done in %s\n", len(values), took.Round(time.Millisecond))
	return nil
}

// rangeProgress folds the progress of the runs of a backfill into one
// runner.Progress for one bar over the whole range. Values not started yet
// are counted at the mean size of the values seen so far, so the total and
// the ETA firm up as the range goes.
type rangeProgress struct {
	mu     sync.Mutex
	name   string
	n      int
	start  time.Time
	runs   map[string]*valueProgress
	nDone  int
	latest string
}

type valueProgress struct {
	p     runner.Progress
	fresh int64 // rows read by this process (resumed shards excluded)
	done  bool
}

func newRangeProgress(name string, values []string, start time.Time) *rangeProgress {
	return &rangeProgress{name: name, n: len(values), start: start, runs: map[string]*valueProgress{}}
}

// update records value's progress and returns the range's.
func (a *rangeProgress) update(value string, p runner.Progress, now time.Time) runner.Progress {
	a.mu.Lock()
	defer a.mu.Unlock()
	vp := a.runs[value]
	if vp == nil {
		vp = &valueProgress{}
		a.runs[value] = vp
	}
	vp.p = p
	vp.fresh = int64(p.Rate * p.Elapsed.Seconds())
	a.latest = value
	return a.snapshot(now)
}

// finish marks value's run done with its result and returns the range's
// progress.
func (a *rangeProgress) finish(value string, res runner.Result, now time.Time) runner.Progress {
	a.mu.Lock()
	defer a.mu.Unlock()
	vp := a.runs[value]
	if vp == nil {
		// Done before its first progress report (already done, or quick).
		vp = &valueProgress{}
		a.runs[value] = vp
	}
	vp.fresh = res.RowsThisProcess
	if !vp.done {
		vp.done = true
		a.nDone++
	}
	rows := res.Run.Counts.RowsIn
	vp.p.RowsDone, vp.p.RowsTotal = rows, rows
	vp.p.ShardsDone, vp.p.ShardsTotal = res.Run.Shards, res.Run.Shards
	vp.p.Rejected = res.Run.Counts.Rejected
	return a.snapshot(now)
}

func (a *rangeProgress) snapshot(now time.Time) runner.Progress {
	var out runner.Progress
	var fresh int64 // rows read by this process
	for _, vp := range a.runs {
		out.RowsDone += vp.p.RowsDone
		out.RowsTotal += vp.p.RowsTotal
		out.ShardsDone += vp.p.ShardsDone
		out.ShardsTotal += vp.p.ShardsTotal
		out.Rejected += vp.p.Rejected
		fresh += vp.fresh
	}
	if seen := len(a.runs); seen > 0 && seen < a.n {
		out.RowsTotal += out.RowsTotal / int64(seen) * int64(a.n-seen)
	}
	out.Elapsed = now.Sub(a.start)
	if s := out.Elapsed.Seconds(); s > 0 && fresh > 0 {
		out.Rate = float64(fresh) / s
		out.ETA = time.Duration(float64(out.RowsTotal-out.RowsDone) / out.Rate * float64(time.Second))
	}
	out.RunID = fmt.Sprintf("backfill %d/%d done, latest %s=%s", a.nDone, a.n, a.name, a.latest)
	return out
}
