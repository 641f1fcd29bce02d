package runner

import (
	"errors"
	"fmt"
	"io"

	"github.com/precog-ml/precog/jobs/ledger"
)

// ReportCancel tells w what Cancel of run id did on a shared (Postgres)
// ledger, as precog cancel RUN --db and the dashboard's Cancel button say
// it, and returns the error that stands: a run publishing or not
// cancellable is a *RefusedError (nothing changed); a cancelled run whose
// sink cleanup is pending is said, and no error when a worker of its pool
// finishes the cleanup (recorded). res and err are Cancel's; the caller
// words ledger.ErrNotFound, which names its ledger.
func ReportCancel(w io.Writer, id string, res CancelResult, err error) error {
	var pending *CleanupPendingError
	switch {
	case errors.Is(err, ledger.ErrPublishing):
		return &RefusedError{Err: fmt.Errorf("run %s is publishing (its results are being made visible in every sink): cancelling now could leave the sinks on different versions; it finishes in moments (a worker takes over a publish whose worker died): %w", id, err)}
	case errors.Is(err, ErrNotCancellable):
		return &RefusedError{Err: err}
	case errors.As(err, &pending):
		fmt.Fprintln(w, pending.Error())
		if pending.Recorded {
			return nil
		}
		return err
	case res.Dropped:
		fmt.Fprintf(w, "run %s had failed; removed the staged data it kept for a retry (it stays failed; precog retry %s now recomputes its shards)\n", id, id)
	case res.Again:
		fmt.Fprintf(w, "run %s was already cancelled; cleaning its sinks again\n", id)
	case res.Run.ID != "":
		fmt.Fprintf(w, "run %s cancelled\n", id)
	}
	if err != nil {
		return err
	}
	res.WriteCleaned(w)
	return nil
}
