package runview

import (
	"fmt"
	"io"
	"time"
)

// WriteSummary prints a succeeded run followed to its end on the Postgres
// ledger (precog run --db, submit --wait, retry --wait): the summary
// precog run prints for a local run, from the ledger's view.
func (v Run) WriteSummary(w io.Writer) error {
	_, err := fmt.Fprintf(w, "run %s %s (version %s, model %s)\n  rows:      %d in, %d out, %d rejected\n  duration:  %s since it was created (%s rows/s)\n",
		v.ID, v.State, v.Version, v.ModelVersion, v.RowsDone, v.RowsOut, v.Rejected,
		Duration(time.Duration(v.DurationS*float64(time.Second))), Human(int64(v.RowsPerS)))
	return err
}
