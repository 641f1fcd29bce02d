package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
)

// LocalActions are the buttons over the embedded ledger under stateDir:
// Cancel is precog cancel's runner.CancelLocal; Retry puts the failed
// shards of an open run back to pending (LedgerRetry: the next precog run
// of the job executes them; the dashboard runs nothing itself). Each opens
// the ledger for its action only: a precog run may hold it in between.
func LocalActions(stateDir string, log *slog.Logger) Actions {
	return Actions{
		Cancel: func(ctx context.Context, id string) (string, error) {
			res, err := runner.CancelLocal(ctx, stateDir, id, runner.CancelOptions{Log: log})
			if pe := (*runner.CleanupPendingError)(nil); errors.As(err, &pe) {
				return pe.Error(), nil // cancelled: the page says what is left
			}
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("run %s %s", res.Run.ID, res.Run.State), nil
		},
		Retry: func(ctx context.Context, id string) (string, error) {
			loc := open.Location{StateDir: stateDir}
			led, err := open.Open(ctx, loc, open.Options{})
			if err != nil {
				return "", err
			}
			defer led.Close()
			return LedgerRetry(led, false, loc.String())(ctx, id)
		},
	}
}

// LedgerRetry is the Retry button over led (cluster: the Postgres
// ledger, where names it in errors): runner.Retry as precog retry RUN
// calls it, except that it never resumes a run here: the pool's workers,
// or on the embedded ledger the next precog run of the job, execute the
// shards put back to pending.
func LedgerRetry(led ledger.Store, cluster bool, where string) func(ctx context.Context, id string) (string, error) {
	return func(ctx context.Context, id string) (string, error) {
		r, err := led.Run(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			return "", fmt.Errorf("run %s: not found in %s (see precog runs)", id, where)
		} else if err != nil {
			return "", err
		}
		res, err := runner.Retry(ctx, runner.RetryParams{Ledger: led, Run: r, Cluster: cluster})
		if err != nil {
			return "", err
		}
		return res.String(), nil
	}
}
