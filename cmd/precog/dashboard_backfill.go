package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
	command := func(ctx context.Context, out *bytes.Buffer) *cobra.Command {
		c := &cobra.Command{}
		c.SetContext(ctx)
		c.SetOut(out)
		c.SetErr(out)
		return c
	}
	return dashboard.BackfillActions{
		Cancel: func(ctx context.Context, id string) (string, error) {
			var out bytes.Buffer
			ok, err := cancelIfBackfill(command(ctx, &out), g, db, id, cancelOptions{drain: drain, out: &out, log: g.log})
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
			bl, b, ok, err := openBackfill(ctx, led, id)
			if err != nil {
				return "", err
			}
			if !ok {
				return "", fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
			}
			if led.cluster != nil {
				var out bytes.Buffer
				err := retryBackfill(command(ctx, &out), g, led, bl, b, 1)
				return strings.TrimSpace(out.String()), err
			}
			values, err := backfill.Retry(ctx, bl, id, os.LookupEnv, nil)
			if err != nil {
				return "", err
			}
			if len(values) == 0 {
				return fmt.Sprintf("backfill %s has no failed or cancelled value: nothing to retry", id), nil
			}
			return fmt.Sprintf("backfill %s: new runs for %v; the same precog backfill command executes them on this machine", id, values), nil
		},
	}
}
