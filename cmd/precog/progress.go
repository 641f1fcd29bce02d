package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/precog-ml/precog/runner"
)

// progressBar draws a one-line bar on a terminal, or logs a line every
// logEvery when stderr is not a terminal (CI, Kubernetes logs).
type progressBar struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	enabled bool
	log     *slog.Logger
	last    time.Time
	drawn   bool
}

const logEvery = 10 * time.Second

func newProgressBar(w *os.File, enabled bool, log *slog.Logger) *progressBar {
	return &progressBar{w: w, tty: term.IsTerminal(int(w.Fd())), enabled: enabled, log: log}
}

func (b *progressBar) every() time.Duration {
	if b.tty {
		return 200 * time.Millisecond
	}
	return time.Second
}

func (b *progressBar) update(p runner.Progress) {
	if !b.enabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tty {
		if time.Since(b.last) < logEvery {
			return
		}
		b.last = time.Now()
		b.log.Info("progress", "run", p.RunID, "rows", p.RowsDone, "rows_total", p.RowsTotal,
			"shards", fmt.Sprintf("%d/%d", p.ShardsDone, p.ShardsTotal), "rows_per_s", int64(p.Rate),
			"rejected", p.Rejected, "eta", p.ETA.Round(time.Second).String())
		return
	}
	width := 30
	frac := 0.0
	if p.RowsTotal > 0 {
		frac = min(float64(p.RowsDone)/float64(p.RowsTotal), 1)
	}
	filled := int(frac * float64(width))
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	eta := "--"
	if p.ETA > 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "\r\033[K%s %5.1f%%  %s/%s rows  %s rows/s  ETA %s  shards %d/%d",
		bar, frac*100, human(p.RowsDone), human(p.RowsTotal), human(int64(p.Rate)), eta, p.ShardsDone, p.ShardsTotal)
	if p.Rejected > 0 {
		fmt.Fprintf(b.w, "  rejected %d", p.Rejected)
	}
	b.drawn = true
}

func (b *progressBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

func human(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
