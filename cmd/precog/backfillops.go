package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
)

// backfillRuns lists every run of backfill id, newest first.
func backfillRuns(ctx context.Context, led *openedLedger, id string) ([]jobs.Run, error) {
	rs, err := backfill.RunsByID(ctx, led.Store, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, invalid(fmt.Errorf("backfill %s: not found in %s", id, led.where))
	}
	return rs, err
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

// retryBackfill is `precog retry ID` of a backfill: each failed or
// cancelled value is taken up again (backfill.Retry: a failed run whose
// staged data is kept is resumed, the others get new runs), printed value
// by value; on the embedded ledger the new runs run here.
func retryBackfill(ctx context.Context, g *globals, led *openedLedger, bl ledger.Store, b ledger.Backfill, parallel int, out io.Writer) error {
	res, err := backfill.Retry(ctx, bl, b.ID, os.LookupEnv, nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, res)
	values := res.New()
	if len(values) == 0 || led.cluster != nil {
		return nil
	}
	g.runningJob()
	return backfill.RunRetried(ctx, bl, b.ID, values, backfill.LocalOptions{StateDir: g.stateDir, ShardParallel: parallel, Logger: g.log})
}

// cancelIfBackfill is `precog cancel ID` of a backfill (done true when id
// names one; backfill.CancelByID), printing what it did to o.out.
func cancelIfBackfill(ctx context.Context, g *globals, db, id string, o cancelOptions) (bool, error) {
	led, err := openLedger(ctx, g, db)
	if err != nil {
		return false, nil // the run path reports the ledger's error
	}
	c, ok, err := backfill.CancelByID(ctx, backfill.CancelParams{Ledger: led.Store, Close: led.Close, StateDir: led.stateDir(g), ID: id,
		Options: runner.CancelOptions{Drain: o.drain, CleanAgain: true, ScanUnindexed: o.scanUnindexed, Log: o.log}})
	if err != nil || !ok {
		return err != nil, err
	}
	return true, c.Report(o.out)
}
