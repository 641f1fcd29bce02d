package scheduler

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// DefaultWatchEvery is how often Watch compares the specs' stamp.
const DefaultWatchEvery = 2 * time.Second

// WatchParams tune Watch.
type WatchParams struct {
	// Stamp fingerprints the specs (Dir.Stamp): a new value reloads.
	Stamp func() string
	// Reload is called on each change (Scheduler.Reload).
	Reload func()
	// Every is how often Stamp is compared (default DefaultWatchEvery).
	Every time.Duration
	// Hup reloads on each value; nil: this process's SIGHUP.
	Hup <-chan os.Signal
}

// Watch calls p.Reload on SIGHUP (or p.Hup) and whenever p.Stamp changes,
// until ctx ends: `precog scheduler` reloads its specs without a restart.
func Watch(ctx context.Context, p WatchParams) {
	if p.Hup == nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		p.Hup = hup
	}
	if p.Every <= 0 {
		p.Every = DefaultWatchEvery
	}
	stamp := p.Stamp()
	t := time.NewTicker(p.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.Hup:
			p.Reload()
		case <-t.C:
			if now := p.Stamp(); now != stamp {
				stamp = now
				p.Reload()
			}
		}
	}
}
