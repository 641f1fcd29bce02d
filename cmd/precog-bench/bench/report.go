package bench

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"
)

// section is one table of the report.
type section struct {
	Title string
	Rows  []row
	Notes []string
}

// row is one measurement: ours against the raw limit.
type row struct {
	What    string
	Ours    string
	Raw     string
	Ratio   string
	Target  string
	Verdict string
}

func (s *section) add(r row)                  { s.Rows = append(s.Rows, r) }
func (s *section) note(f string, args ...any) { s.Notes = append(s.Notes, fmt.Sprintf(f, args...)) }

// atLeast is a row whose ratio should be ≥ target.
func atLeast(what string, ours, raw float64, unit string, target float64) row {
	r := ours / raw
	return row{What: what, Ours: rate(ours, unit), Raw: rate(raw, unit), Ratio: fmt.Sprintf("%.2f", r),
		Target: fmt.Sprintf("≥ %.2f", target), Verdict: verdict(r >= target)}
}

// atMost is a row whose ratio should be ≤ target.
func atMost(what, ours, raw string, r, target float64) row {
	return row{What: what, Ours: ours, Raw: raw, Ratio: fmt.Sprintf("%.2f", r),
		Target: fmt.Sprintf("≤ %.2f", target), Verdict: verdict(r <= target)}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// rate formats a throughput: 1234567 → "1.23M rows/s".
func rate(v float64, unit string) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM %s", v/1e6, unit)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk %s", v/1e3, unit)
	default:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
}

// mib formats a byte count.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// dur formats a duration for a table.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

// render writes the report as markdown.
func render(secs []*section, machine string, took time.Duration) string {
	var b strings.Builder
	b.WriteString("# precog benchmarks\n\n")
	fmt.Fprintf(&b, "Machine: %s. Harness wall time %s.\n\n", machine, took.Round(time.Second))
	b.WriteString("Every ratio compares precog with the raw limit measured in the same run " +
		"(`make bench`, `go run ./cmd/precog-bench`); absolute numbers move between runs on a shared machine, ratios much less.\n")
	for _, s := range secs {
		fmt.Fprintf(&b, "\n## %s\n\n", s.Title)
		if len(s.Rows) > 0 {
			b.WriteString("| what | precog | raw limit | ratio | target | verdict |\n|---|---|---|---|---|---|\n")
			for _, r := range s.Rows {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.What, r.Ours, r.Raw, r.Ratio, r.Target, r.Verdict)
			}
		}
		if len(s.Notes) > 0 {
			b.WriteString("\n")
			for _, n := range s.Notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
		}
	}
	return b.String()
}

// nprocs is the number of CPUs this process may use.
func nprocs() int { return runtime.NumCPU() }
