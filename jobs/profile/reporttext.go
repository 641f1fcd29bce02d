package profile

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints the report for people (precog diff, precog status): a
// header naming what it compares with, one line per check with its value,
// threshold, result and note, and the verdict.
func (r Report) WriteText(w io.Writer) error {
	if r.FirstRun {
		fmt.Fprintf(w, "checks: %s\n", r.Note)
	} else {
		fmt.Fprintf(w, "checks against version %s (run %s):\n", r.Against, r.AgainstRun)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tVALUE\tTHRESHOLD\tRESULT\tNOTE")
	for _, c := range r.Checks {
		res := "passed"
		if !c.Passed {
			res = "FAILED"
		}
		note := c.Error
		if c.Note != "" {
			note = c.Note + " " + note
		}
		fmt.Fprintf(tw, "%s\t%.4g\t%v\t%s\t%s\n", c.Name, c.Value, c.Threshold, res, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "checks failed"
	if r.Passed {
		verdict = "all checks passed"
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}
