package backfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
)

// CancelParams cancel a backfill as `precog cancel ID` and the dashboard's
// Cancel button do.
type CancelParams struct {
	// Ledger holds the backfill; Close closes it. CancelByID calls Close
	// once before it returns, and before it cancels the runs of the
	// embedded ledger (runner.CancelLocal opens that ledger itself).
	Ledger ledger.Store
	Close  func() error
	// StateDir is the embedded ledger's state dir; "" for a shared ledger
	// (Postgres), whose runs are cancelled through Ledger, waiting up to
	// Options.Drain for the workers holding their shards.
	StateDir string
	ID       string
	// Options cancel each open run (runner.Cancel; on the embedded ledger
	// runner.CancelLocal, which sets its own drain and leaves a run
	// cancelled meanwhile alone).
	Options runner.CancelOptions
}

// RunCancel is how one open run of a backfill was cancelled.
type RunCancel struct {
	ID  string
	Res runner.CancelResult
	Err error
}

// Cancelled is what CancelByID did.
type Cancelled struct {
	ID string
	// Open are the values' runs that were open; Runs how each was
	// cancelled (those that finished meanwhile left out).
	Open []string
	Runs []RunCancel
	// Shared: the runs were cancelled through a shared ledger.
	Shared bool
}

// CancelByID cancels backfill p.ID: no value is started any more (Cancel),
// and every open value's run is cancelled as `precog cancel RUN` would
// (its unpublished data removed from every sink). ok is false when p.ID
// names no backfill (the caller treats it as a run). A run's own failure
// is in its RunCancel, for Report.
func CancelByID(ctx context.Context, p CancelParams) (c Cancelled, ok bool, err error) {
	closeLed := sync.OnceValue(p.Close)
	defer closeLed()
	_, b, ok, err := Find(ctx, p.Ledger, p.ID)
	if err != nil || !ok {
		return Cancelled{}, ok, err
	}
	c = Cancelled{ID: b.ID, Shared: p.StateDir == ""}
	if c.Open, err = Cancel(ctx, p.Ledger, b); err != nil {
		return c, true, err
	}
	if !c.Shared {
		closeLed()
	}
	for _, id := range c.Open {
		var rc RunCancel
		if c.Shared {
			rc.Res, rc.Err = runner.Cancel(ctx, p.Ledger, id, p.Options)
		} else {
			o := p.Options
			o.CleanAgain = false
			rc.Res, rc.Err = runner.CancelLocal(ctx, p.StateDir, id, o)
		}
		if errors.Is(rc.Err, runner.ErrNotCancellable) {
			continue // it ended meanwhile
		}
		rc.ID = id
		c.Runs = append(c.Runs, rc)
	}
	return c, true, nil
}

// Report writes what the cancel did for people, one line per run and the
// sinks cleaned, then the backfill's line; it returns the runs' errors
// joined (a cleanup the pool's workers finish is not one; a run in its
// publish step is a *runner.RefusedError).
func (c Cancelled) Report(w io.Writer) error {
	var errs []error
	for _, rc := range c.Runs {
		if err := rc.report(w, c.Shared); err != nil {
			errs = append(errs, err)
		}
	}
	fmt.Fprintf(w, "backfill %s cancelled: %d open value(s) cancelled\n", c.ID, len(c.Open))
	return errors.Join(errs...)
}

// report writes one run's cancel: on a shared ledger as precog cancel RUN
// --db says it (runner.ReportCancel); on the embedded one its state.
func (rc RunCancel) report(w io.Writer, shared bool) error {
	switch {
	case shared:
		return runner.ReportCancel(w, rc.ID, rc.Res, rc.Err)
	case errors.Is(rc.Err, ledger.ErrPublishing):
		return &runner.RefusedError{Err: fmt.Errorf("run %s is publishing (its results are being made visible in every sink): cancelling now could leave the sinks on different versions; it finishes in moments: %w", rc.ID, rc.Err)}
	case rc.Err != nil:
		return rc.Err
	}
	fmt.Fprintf(w, "run %s %s\n", rc.ID, rc.Res.Run.State)
	rc.Res.WriteCleaned(w)
	return nil
}
