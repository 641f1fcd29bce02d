package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/profile"
	"github.com/precog-ml/precog/jobs/runview"
)

// RunViews is RunView of each run, with its shards read from led, at now
// (precog runs).
func RunViews(ctx context.Context, led ledger.Store, stateDir string, rs []jobs.Run, now time.Time) ([]runview.Run, error) {
	views := make([]runview.Run, 0, len(rs))
	for _, r := range rs {
		shards, err := led.Shards(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		v, err := RunView(ctx, led, stateDir, r, shards, now)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	return views, nil
}

// StatusParams is the run RunStatus shows.
type StatusParams struct {
	Ledger ledger.Store
	// StateDir is the embedded ledger's ("" for the Postgres ledger).
	StateDir string
	Run      jobs.Run
	Shards   []jobs.Shard
	// Workers are the ledger's workers: those holding the run's running
	// shards, and those unable to run it, are named.
	Workers []ledger.WorkerInfo
	Now     time.Time
}

// RunStatus is one run as precog status shows it (see StatusReport).
func RunStatus(ctx context.Context, p StatusParams) (StatusReport, error) {
	v, err := RunView(ctx, p.Ledger, p.StateDir, p.Run, p.Shards, p.Now)
	if err != nil {
		return StatusReport{}, err
	}
	sample, err := RejectSample(ctx, p.Ledger, v)
	if err != nil {
		return StatusReport{}, err
	}
	sr := StatusReport{Status: runview.StatusOf(v, sample), Shards: p.Shards, Workers: p.Workers}
	if r, ok, err := CheckReport(ctx, p.Ledger, p.Run.ID); err == nil && ok {
		sr.Report, sr.Status.Checks = &r, r.Checks
	}
	if hs := runview.HoldersOf(p.Shards, p.Workers); len(hs) > 0 && v.State != runview.StateInterrupted {
		sr.Status.Holders = hs
	}
	sr.Status.CannotRun = runview.UnableFor(p.Run.ID, p.Workers)
	return sr, nil
}

// StatusReport is one run as precog status shows it: Status (its --json
// form) holds its view (RunView), its reject sample, the checks of its
// stored report, the workers holding its running shards (none for an
// interrupted run: its holder is gone) and those unable to run it; Report
// is the stored checks' report (nil when it has none or it cannot be
// read: status shows the run without it).
type StatusReport struct {
	Status  runview.Status
	Report  *profile.Report
	Shards  []jobs.Shard
	Workers []ledger.WorkerInfo
}

// WriteText prints the report for people: the run's detail view, then its
// checks' report.
func (sr StatusReport) WriteText(w io.Writer) error {
	d := runview.Detail{Run: sr.Status.Run, Shards: sr.Shards, Rejects: sr.Status.RejectSample, Workers: sr.Workers}
	if err := d.Write(w); err != nil || sr.Report == nil {
		return err
	}
	return sr.Report.WriteText(w)
}

// RejectSample reads the sample of a run's rejected rows that precog
// status and the dashboard's run page show (runview.DefaultRejectSample
// of them); a run without rejects has none to read.
func RejectSample(ctx context.Context, led ledger.Ledger, v runview.Run) ([]jobs.Reject, error) {
	if v.Rejected == 0 {
		return nil, nil
	}
	sample, err := led.RejectSample(ctx, v.ID, runview.DefaultRejectSample)
	if err != nil {
		return nil, fmt.Errorf("run %s: reject sample: %w", v.ID, err)
	}
	return sample, nil
}

// CheckReport reads the checks' report stored for a run (precog status,
// precog diff, the dashboard's run page); ok is false when it has none
// (ledger.ErrNotFound).
func CheckReport(ctx context.Context, led ledger.Checks, runID string) (rep profile.Report, ok bool, err error) {
	b, err := led.CheckReport(ctx, runID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return rep, false, nil
	case err != nil:
		return rep, false, fmt.Errorf("run %s: checks' report: %w", runID, err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, false, fmt.Errorf("run %s: checks' report: %w", runID, err)
	}
	return rep, true, nil
}
