package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// openBackfill returns the ledger's backfill id when id names one (ok
// false when it names none, so the caller treats id as a run).
func openBackfill(ctx context.Context, led *openedLedger, id string) (ledger.Store, ledger.Backfill, bool, error) {
	b, err := led.Backfill(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, b, false, nil
	}
	return led.Store, b, err == nil, err
}

// withBackfill fills v.Backfill with the backfill v's run belongs to.
func withBackfill(ctx context.Context, led *openedLedger, v runview.Run) (runview.Run, error) {
	id, _, err := led.BackfillOf(ctx, v.ID)
	switch {
	case err == nil:
		v.Backfill = id
	case !errors.Is(err, ledger.ErrNotFound):
		return v, err
	}
	return v, nil
}

// backfillRunIDs lists every run of a backfill (each value's runs).
func backfillRunIDs(ctx context.Context, led *openedLedger, id string) ([]string, error) {
	_, b, ok, err := openBackfill(ctx, led, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, invalid(fmt.Errorf("backfill %s: not found in %s", id, led.where))
	}
	var ids []string
	for _, d := range b.Dates {
		ids = append(ids, d.Runs...)
	}
	return ids, nil
}

// printBackfillStatus is `precog status ID` of a backfill.
func printBackfillStatus(ctx context.Context, bl backfill.Ledger, id string, w io.Writer, asJSON bool) error {
	v, _, err := backfill.Status(ctx, bl, id, time.Now())
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(w).Encode(v)
	}
	return v.Table(w)
}

// cancelBackfill is `precog cancel ID` of a backfill: no value is started
// any more, and every open value's run is cancelled as `precog cancel RUN`
// would (its unpublished data removed from every sink).
func cancelBackfill(cmd *cobra.Command, g *globals, ref backfillRef, o cancelOptions) error {
	ctx := cmd.Context()
	led, bl, b := ref.led, ref.bl, ref.b
	if err := bl.SetBackfill(ctx, b.ID, b.Parallel, true); err != nil {
		return err
	}
	var open []string
	for _, d := range b.Dates {
		r, err := bl.Run(ctx, d.Run())
		if err != nil {
			return err
		}
		if !r.State.Terminal() {
			open = append(open, r.ID)
		}
	}
	var errs []error
	if led.cluster != nil {
		for _, id := range open {
			if err := cancelCluster(ctx, led, id, o); err != nil && !errors.Is(err, runner.ErrNotCancellable) {
				errs = append(errs, err)
			}
		}
	} else {
		ref.close() // CancelLocal opens the embedded ledger itself
		for _, id := range open {
			res, err := runner.CancelLocal(ctx, g.stateDir, id, runner.CancelOptions{ScanUnindexed: o.scanUnindexed, Log: g.log})
			if err != nil && !errors.Is(err, runner.ErrNotCancellable) {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(o.out, "run %s %s\n", id, res.Run.State)
			printCleaned(o.out, res)
		}
	}
	fmt.Fprintf(o.out, "backfill %s cancelled: %d open value(s) cancelled\n", b.ID, len(open))
	return errors.Join(errs...)
}

// retryBackfill is `precog retry ID` of a backfill: each failed or
// cancelled value gets a new run; on the embedded ledger they run here.
func retryBackfill(cmd *cobra.Command, g *globals, led *openedLedger, bl ledger.Store, b ledger.Backfill, parallel int) error {
	ctx := cmd.Context()
	values, err := backfill.Retry(ctx, bl, b.ID, os.LookupEnv, nil)
	if se := (*jobs.SpecError)(nil); errors.As(err, &se) {
		return invalid(err) // a spec that does not load here (an unset variable): a config error
	} else if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if len(values) == 0 {
		fmt.Fprintf(out, "backfill %s has no failed or cancelled value: nothing to retry\n", b.ID)
		return nil
	}
	fmt.Fprintf(out, "backfill %s: new runs for %v\n", b.ID, values)
	if led.cluster != nil {
		return nil
	}
	b, err = bl.Backfill(ctx, b.ID)
	if err != nil {
		return err
	}
	specs := map[string]*jobs.Spec{}
	for _, d := range b.Dates {
		if !slices.Contains(values, d.Value) {
			continue
		}
		r, err := bl.Run(ctx, d.Run())
		if err != nil {
			return err
		}
		if specs[d.Value], err = jobs.Parse(r.Spec, r.SpecFile, r.Params, os.LookupEnv); err != nil {
			return invalid(err)
		}
	}
	g.runningJob()
	res := backfill.RunLocal(ctx, bl, b, specs, backfill.LocalOptions{StateDir: g.stateDir, Parallel: b.Parallel, ShardParallel: parallel, Logger: g.log})
	var errs []error
	for _, r := range res {
		if r.Err != nil && slices.Contains(values, r.Value) {
			errs = append(errs, fmt.Errorf("%s: %w", r.Value, r.Err))
		}
	}
	return errors.Join(errs...)
}

// backfillRuns lists every run of backfill id, newest first.
func backfillRuns(ctx context.Context, led *openedLedger, id string) ([]jobs.Run, error) {
	ids, err := backfillRunIDs(ctx, led, id)
	if err != nil {
		return nil, err
	}
	var rs []jobs.Run
	for _, rid := range ids {
		r, err := led.Run(ctx, rid)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	slices.SortStableFunc(rs, func(a, b jobs.Run) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return rs, nil
}

// cancelIfBackfill cancels backfill id when id names one (done true).
func cancelIfBackfill(cmd *cobra.Command, g *globals, db, id string, o cancelOptions) (bool, error) {
	led, err := openLedger(cmd.Context(), g, db)
	if err != nil {
		return false, nil // the run path reports the ledger's error
	}
	bl, b, ok, err := openBackfill(cmd.Context(), led, id)
	if err != nil || !ok {
		led.Close()
		return err != nil, err
	}
	closeLed := sync.OnceValue(led.Close)
	defer closeLed()
	return true, cancelBackfill(cmd, g, backfillRef{led: led, close: closeLed, bl: bl, b: b}, o)
}

// backfillRef is an opened backfill: the ledger it lives in (close closes
// that ledger once), the ledger's backfill part and the record.
type backfillRef struct {
	led   *openedLedger
	close func() error
	bl    backfill.Ledger
	b     ledger.Backfill
}
