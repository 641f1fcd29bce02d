package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/precog-ml/precog/jobs/ledger"
)

// Ready reports whether the worker is able to work, and why not: the
// ledger answers, its role may claim (privileges included), and the last
// claim attempt did not fail, and it can execute every run it met (one
// whose spec or model does not load here makes it unready, naming the run
// and why, until the run opens here or ends). A worker whose every claim
// fails (a role that can only read) is not ready, so that probes,
// autoscalers and the "no ready worker" alert see it.
func (w *Worker) Ready(ctx context.Context) error {
	if err := w.led.CheckClaim(ctx); err != nil {
		return err
	}
	if p := w.claimErr.Load(); p != nil {
		return fmt.Errorf("the last claim failed: %w", *p)
	}
	return w.unable.err()
}

// Probe is /readyz of precog worker: not ready while the worker is not
// working (before Run, once its context ends and it drains, after Run),
// else Ready's answer.
func (w *Worker) Probe(ctx context.Context) error {
	if !w.working.Load() {
		return errors.New("not running (starting or draining)")
	}
	return w.Ready(ctx)
}

// noteClaim records the outcome of a claim attempt for Ready: an error
// other than "nothing to claim" makes the worker unready until a claim
// attempt succeeds again.
func (w *Worker) noteClaim(ctx context.Context, err error) {
	if err == nil || errors.Is(err, ledger.ErrNoShard) || errors.Is(err, ledger.ErrRunFinished) {
		w.claimErr.Store(nil)
		return
	}
	if ctx.Err() == nil {
		w.claimErr.Store(&err)
	}
}
