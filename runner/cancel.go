package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/sinks"
)

// ErrNotCancellable means the run already finished.
var ErrNotCancellable = errors.New("run already finished")

// CancelLocal abandons an unfinished run of the embedded ledger under
// stateDir: it is marked cancelled and everything it wrote is removed from
// every sink (run tables, Redis versions, staging directories), so the next
// `precog run` starts afresh. The run's sinks come from the spec it
// recorded (its YAML before ${ENV} expansion, expanded now, so secrets
// never sit in the ledger).
func CancelLocal(ctx context.Context, stateDir, runID string, log *slog.Logger) (jobs.Run, error) {
	if log == nil {
		log = slog.Default()
	}
	led, err := bolt.OpenIn(stateDir)
	if err != nil {
		return jobs.Run{}, err
	}
	defer led.Close()
	run, err := led.Run(ctx, runID)
	if err != nil {
		return jobs.Run{}, fmt.Errorf("run %s: %w", runID, err)
	}
	if run.State.Terminal() {
		return run, fmt.Errorf("run %s is %s: %w", runID, run.State, ErrNotCancellable)
	}
	var snks []sinks.Sink
	if len(run.Spec) > 0 {
		spec, err := jobs.Parse(run.Spec, run.SpecFile, run.Params, os.LookupEnv)
		if err != nil {
			return run, fmt.Errorf("run %s: its recorded spec: %w", runID, err)
		}
		if snks, err = OpenSinks(ctx, spec); err != nil {
			return run, fmt.Errorf("run %s: %w", runID, err)
		}
		defer func() {
			for _, s := range snks {
				s.Close()
			}
		}()
	} else {
		log.Warn("the run recorded no spec (made by an older precog): marking it cancelled without cleaning its sinks", "run", runID)
	}
	info := sinks.RunInfo{Job: run.Job, RunID: run.ID, Version: run.Version, Params: run.Params}
	runStores{led: led, snks: snks, info: info, log: log}.end(ctx, jobs.RunCancelled, errors.New("cancelled by precog cancel"))
	return led.Run(ctx, runID)
}
