package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/precog-ml/precog/dashboard"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner/backfill"
)

// backfillActions are a backfill page's buttons: the code of `precog
// cancel ID` and `precog retry ID` (db "" for the embedded ledger), their
// output as the message. On the embedded ledger the dashboard runs
// nothing itself: Retry records the new runs, and the same precog backfill
// command executes them.
func backfillActions(g *globals, db string, drain time.Duration) dashboard.BackfillActions {
	return dashboard.BackfillActions{
		Cancel: func(ctx context.Context, id string) (string, error) {
			var out strings.Builder
			ok, err := cancelIfBackfill(ctx, g, db, id, cancelOptions{drain: drain, out: &out, log: g.log})
			if !ok && err == nil {
				return "", fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
			}
			return strings.TrimSpace(out.String()), err
		},
		Retry: func(ctx context.Context, id string) (string, error) {
			led, err := openLedger(ctx, g, db)
			if err != nil {
				return "", err
			}
			defer led.Close()
			res, err := backfill.Retry(ctx, led.Store, id, os.LookupEnv, nil)
			if err != nil {
				return "", err
			}
			msg := strings.ReplaceAll(res.String(), "\n ", ";")
			if led.cluster == nil && len(res.New()) > 0 {
				msg += "; the same precog backfill command executes them on this machine"
			}
			return msg, nil
		},
	}
}
