package runner

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestReportCancel: what precog cancel --db and the dashboard's Cancel
// button say of each Cancel outcome, and the error that stands: refusals
// are *RefusedError (exit 2), a pending cleanup a worker finishes is no
// error, one nobody recorded is; a run cancelled before, or now, lists
// the sinks cleaned.
func TestReportCancel(t *testing.T) {
	run := jobs.Run{ID: "r1", Version: "v1", Pool: "gpu"}
	cleaned := CancelResult{Run: run, Cleaned: []string{"redis", "postgres"}}
	boom := errors.New("redis: connection refused")
	for _, c := range []struct {
		name    string
		res     CancelResult
		err     error
		out     string
		refused bool
		errIs   error
	}{
		{name: "cancelled", res: cleaned,
			out: "run r1 cancelled\n  redis: removed the data of version v1\n  postgres: removed the data of version v1\n"},
		{name: "again", res: CancelResult{Run: run, Again: true, NoSpec: true},
			out: "run r1 was already cancelled; cleaning its sinks again\nthe run recorded no spec: its sinks were not cleaned\n"},
		{name: "publishing", err: fmt.Errorf("run r1: %w", ledger.ErrPublishing), refused: true, errIs: ledger.ErrPublishing},
		{name: "not cancellable", err: fmt.Errorf("run r1 succeeded: %w", ErrNotCancellable), refused: true, errIs: ErrNotCancellable},
		{name: "pending, recorded", err: &CleanupPendingError{Run: run, Err: boom, Recorded: true},
			out: "run r1 cancelled; sink cleanup pending: redis: connection refused (a worker of pool gpu finishes it, or run precog cancel r1 again where the sinks' environment is set)\n"},
		{name: "pending, not recorded", err: &CleanupPendingError{Run: run, Err: boom}, errIs: boom,
			out: "run r1 cancelled; sink cleanup pending: redis: connection refused (run precog cancel r1 again where the sinks' environment is set)\n"},
		{name: "cancelled, then an error", res: cleaned, err: boom, errIs: boom, out: "run r1 cancelled\n"},
	} {
		var w bytes.Buffer
		err := ReportCancel(&w, "r1", c.res, c.err)
		var ref *RefusedError
		if w.String() != c.out || errors.As(err, &ref) != c.refused || (c.errIs == nil) != (err == nil) || (c.errIs != nil && !errors.Is(err, c.errIs)) {
			t.Errorf("%s: wrote %q, error %v (refused %v); want %q, error %v (refused %v)", c.name, w.String(), err, errors.As(err, &ref), c.out, c.errIs, c.refused)
		}
	}
}
