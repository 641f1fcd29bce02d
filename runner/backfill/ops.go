package backfill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
)

// Find returns the backfill id names (ok false when id names none: the
// caller treats it as a run).
func Find(ctx context.Context, led ledger.Store, id string) (ledger.Store, ledger.Backfill, bool, error) {
	b, err := led.Backfill(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, b, false, nil
	}
	return led, b, err == nil, err
}

// RunsByID lists every run of backfill id (RunsOf); an id that names no
// backfill is the ledger's ledger.ErrNotFound.
func RunsByID(ctx context.Context, led Ledger, id string) ([]jobs.Run, error) {
	b, err := led.Backfill(ctx, id)
	if err != nil {
		return nil, err
	}
	return RunsOf(ctx, led, b)
}

// RunsOf lists every run of b (each value's runs, retries included),
// newest first.
func RunsOf(ctx context.Context, led Ledger, b ledger.Backfill) ([]jobs.Run, error) {
	var rs []jobs.Run
	for _, d := range b.Dates {
		for _, id := range d.Runs {
			r, err := led.Run(ctx, id)
			if err != nil {
				return nil, err
			}
			rs = append(rs, r)
		}
	}
	slices.SortStableFunc(rs, func(a, b jobs.Run) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return rs, nil
}

// Cancel marks b cancelled (no value is started any more) and returns its
// values' open runs, for the caller to cancel as precog cancel RUN does.
func Cancel(ctx context.Context, led Ledger, b ledger.Backfill) (open []string, err error) {
	if err := led.SetBackfill(ctx, b.ID, b.Parallel, true); err != nil {
		return nil, err
	}
	for _, d := range b.Dates {
		r, err := led.Run(ctx, d.Run())
		if err != nil {
			return nil, err
		}
		if !r.State.Terminal() {
			open = append(open, r.ID)
		}
	}
	return open, nil
}

// RunRetried executes on this machine the new runs Retry gave values of
// backfill id (the embedded ledger), with the specs they recorded and this
// environment (one that does not load here is a *runner.RefusedError);
// the error joins the values that did not succeed.
func RunRetried(ctx context.Context, led ledger.Store, id string, values []string, o LocalOptions) error {
	b, err := led.Backfill(ctx, id)
	if err != nil {
		return err
	}
	specs := map[string]*jobs.Spec{}
	for _, d := range b.Dates {
		if !slices.Contains(values, d.Value) {
			continue
		}
		r, err := led.Run(ctx, d.Run())
		if err != nil {
			return err
		}
		if specs[d.Value], err = jobs.Parse(r.Spec, r.SpecFile, r.Params, os.LookupEnv); err != nil {
			return &runner.RefusedError{Err: err}
		}
	}
	if o.Parallel == 0 {
		o.Parallel = b.Parallel
	}
	var errs []error
	for _, r := range RunLocal(ctx, led, b, specs, o) {
		if r.Err != nil && slices.Contains(values, r.Value) {
			errs = append(errs, fmt.Errorf("%s: %w", r.Value, r.Err))
		}
	}
	return errors.Join(errs...)
}
