package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// backfillRuns lists every run of backfill id, newest first.
func backfillRuns(ctx context.Context, led *openedLedger, id string) ([]jobs.Run, error) {
	bl, b, ok, err := backfill.Find(ctx, led.Store, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, invalid(fmt.Errorf("backfill %s: not found in %s", id, led.where))
	}
	return backfill.RunsOf(ctx, bl, b)
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
func cancelBackfill(ctx context.Context, g *globals, ref backfillRef, o cancelOptions) error {
	led, b := ref.led, ref.b
	open, err := backfill.Cancel(ctx, ref.bl, b)
	if err != nil {
		return err
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
func retryBackfill(ctx context.Context, g *globals, led *openedLedger, bl ledger.Store, b ledger.Backfill, parallel int, out io.Writer) error {
	values, err := backfill.Retry(ctx, bl, b.ID, os.LookupEnv, nil)
	if se := (*jobs.SpecError)(nil); errors.As(err, &se) {
		return invalid(err) // a spec that does not load here (an unset variable): a config error
	} else if err != nil {
		return err
	}
	fmt.Fprintln(out, backfill.RetryMessage(b.ID, values))
	if len(values) == 0 || led.cluster != nil {
		return nil
	}
	g.runningJob()
	return backfill.RunRetried(ctx, bl, b.ID, values, backfill.LocalOptions{StateDir: g.stateDir, ShardParallel: parallel, Logger: g.log})
}

// cancelIfBackfill cancels backfill id when id names one (done true).
func cancelIfBackfill(ctx context.Context, g *globals, db, id string, o cancelOptions) (bool, error) {
	led, err := openLedger(ctx, g, db)
	if err != nil {
		return false, nil // the run path reports the ledger's error
	}
	bl, b, ok, err := backfill.Find(ctx, led.Store, id)
	if err != nil || !ok {
		led.Close()
		return err != nil, err
	}
	closeLed := sync.OnceValue(led.Close)
	defer closeLed()
	return true, cancelBackfill(ctx, g, backfillRef{led: led, close: closeLed, bl: bl, b: b}, o)
}

// backfillRef is an opened backfill: the ledger it lives in (close closes
// that ledger once), the ledger's backfill part and the record.
type backfillRef struct {
	led   *openedLedger
	close func() error
	bl    ledger.Store
	b     ledger.Backfill
}
