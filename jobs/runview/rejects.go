package runview

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/precog-ml/precog/jobs"
)

// RejectFormat is how a RejectEncoder writes rejected rows.
type RejectFormat int

const (
	// RejectsText is a header line, then tab-separated lines "key shard
	// position reason" (the reason, free text, last).
	RejectsText RejectFormat = iota
	// RejectsCSV is a header (shard,key,position,reason), then one record
	// per row.
	RejectsCSV
	// RejectsJSON is one JSON array of jobs.Reject objects.
	RejectsJSON
)

// rejectsHeader is the CSV header, in the order of each record.
var rejectsHeader = []string{"shard", "key", "position", "reason"}

// RejectEncoder writes a run's rejected rows as they stream from the
// ledger (precog rejects): one row at a time, so memory does not grow
// with the run's rejects. Close ends the output (a JSON array's bracket,
// a CSV header even with no rows).
type RejectEncoder struct {
	out     io.Writer
	format  RejectFormat
	csv     *csv.Writer
	started bool
}

// NewRejectEncoder writes rejects to out in format.
func NewRejectEncoder(out io.Writer, format RejectFormat) *RejectEncoder {
	e := &RejectEncoder{out: out, format: format}
	if format == RejectsCSV {
		e.csv = csv.NewWriter(out)
	}
	return e
}

// Encode writes one rejected row.
func (e *RejectEncoder) Encode(r jobs.Reject) error {
	first := !e.started
	e.started = true
	switch e.format {
	case RejectsJSON:
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		sep := ",\n"
		if first {
			sep = "[\n"
		}
		_, err = fmt.Fprintf(e.out, "%s%s", sep, b)
		return err
	case RejectsCSV:
		if first {
			if err := e.csv.Write(rejectsHeader); err != nil {
				return err
			}
		}
		return e.csv.Write([]string{strconv.Itoa(r.Shard), r.Key, r.Position, r.Reason})
	}
	if first {
		if _, err := io.WriteString(e.out, "KEY\tSHARD\tPOSITION\tREASON\n"); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(e.out, "%s\t%d\t%s\t%s\n", r.Key, r.Shard, r.Position, r.Reason)
	return err
}

// Close ends the output; the text form of no rows is empty.
func (e *RejectEncoder) Close() error {
	switch e.format {
	case RejectsJSON:
		end := "\n]\n"
		if !e.started {
			end = "[]\n"
		}
		_, err := io.WriteString(e.out, end)
		return err
	case RejectsCSV:
		if !e.started {
			if err := e.csv.Write(rejectsHeader); err != nil {
				return err
			}
		}
		e.csv.Flush()
		return e.csv.Error()
	}
	return nil
}
