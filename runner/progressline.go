package runner

import (
	"fmt"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs/runview"
)

// barWidth is the cells of Bar's bar.
const barWidth = 30

// Bar is p as one line of a terminal's progress bar: the bar, the percent
// of planned rows, rows, rate, ETA, shards and any rejects.
func (p Progress) Bar() string {
	frac := 0.0
	if p.RowsTotal > 0 {
		frac = min(float64(p.RowsDone)/float64(p.RowsTotal), 1)
	}
	filled := int(frac * barWidth)
	eta := "--"
	if p.ETA > 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	line := fmt.Sprintf("%s %5.1f%%  %s/%s rows  %s rows/s  ETA %s  shards %d/%d",
		strings.Repeat("█", filled)+strings.Repeat("░", barWidth-filled), frac*100,
		runview.Human(p.RowsDone), runview.Human(p.RowsTotal), runview.Human(int64(p.Rate)), eta, p.ShardsDone, p.ShardsTotal)
	if p.Rejected > 0 {
		line += fmt.Sprintf("  rejected %d", p.Rejected)
	}
	return line
}

// LogArgs is p as the attributes of a progress log line (slog's key-value
// pairs), for logs that are not a terminal.
func (p Progress) LogArgs() []any {
	return []any{"run", p.RunID, "rows", p.RowsDone, "rows_total", p.RowsTotal,
		"shards", fmt.Sprintf("%d/%d", p.ShardsDone, p.ShardsTotal), "rows_per_s", int64(p.Rate),
		"rejected", p.Rejected, "eta", p.ETA.Round(time.Second).String()}
}
