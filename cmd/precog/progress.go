package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
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
		b.log.Info("progress", p.LogArgs()...)
		return
	}
	fmt.Fprint(b.w, "\r\033[K"+p.Bar())
	b.drawn = true
}

func (b *progressBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}
