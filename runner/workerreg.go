package runner

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/precog-ml/precog/jobs/ledger"
)

// presence keeps this worker's row in the ledger's list of workers
// (ledger.Workers): registered by the first heartbeat, renewed every third
// of the lease and at once when the held shards change, removed on a clean
// stop. A killed worker's row stops being renewed, and `precog workers`
// shows it lost one lease later.
type presence struct {
	mu   sync.Mutex
	held map[presenceSlot]ledger.ShardRef // a claim loop → the shard it holds
	kick chan struct{}
}

// presenceSlot names one claim loop: its device and its number there.
type presenceSlot struct {
	device string
	slot   int
}

func newPresence() *presence {
	return &presence{held: map[presenceSlot]ledger.ShardRef{}, kick: make(chan struct{}, 1)}
}

// hold records that claim loop slot of device holds shard of run (run "":
// nothing).
func (p *presence) hold(device string, slot int, run string, shard int) {
	p.mu.Lock()
	k := presenceSlot{device, slot}
	if run == "" {
		delete(p.held, k)
	} else {
		p.held[k] = ledger.ShardRef{Run: run, Shard: shard, Device: device}
	}
	p.mu.Unlock()
	p.changed()
}

// changed asks for a heartbeat now: what the worker reports changed.
func (p *presence) changed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// current lists the held shards by device.
func (p *presence) current() []ledger.ShardRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ledger.ShardRef, 0, len(p.held))
	for _, r := range p.held {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ledger.ShardRef) int {
		return cmp.Or(strings.Compare(a.Device, b.Device), strings.Compare(a.Run, b.Run), cmp.Compare(a.Shard, b.Shard))
	})
	return out
}

// heartbeat keeps the worker's row until ctx ends, then removes it.
func (w *Worker) heartbeat(ctx context.Context) {
	wl := w.led
	beat := func() {
		w.unable.prune(ctx, w.led)
		info := ledger.WorkerInfo{ID: w.opts.ID, Pool: w.opts.Pool, Devices: w.opts.Devices, Version: w.opts.Version,
			ModelCache: w.runs.models.describe(), Lease: w.opts.Lease, Current: w.pres.current(), Unable: w.unable.list()}
		if err := wl.HeartbeatWorker(ctx, info); err != nil && ctx.Err() == nil {
			w.log.Warn("worker heartbeat", "worker", w.opts.ID, "err", err)
		}
	}
	t := time.NewTicker(w.opts.Lease / 3)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := wl.RemoveWorker(rctx, w.opts.ID); err != nil {
				w.log.Warn("remove worker from the ledger", "worker", w.opts.ID, "err", err)
			}
			return
		case <-t.C:
		case <-w.pres.kick:
		}
	}
}

// describe lists the loaded models as file@sha256-prefix, for the
// ledger's worker list.
func (c *modelCache) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for key := range c.entries {
		parts := strings.SplitN(key, "|", 3)
		if len(parts) < 2 {
			continue
		}
		d := filepath.Base(parts[1]) + "@" + parts[0][:min(12, len(parts[0]))]
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// ListWorkers lists the workers of pool ("" for all) as precog workers
// shows them: a lost worker holding only the shards it still holds
// (StillHeld).
func ListWorkers(ctx context.Context, led ledger.Store, pool string) ([]ledger.WorkerInfo, error) {
	ws, err := led.ListWorkers(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return StillHeld(ctx, led, ws)
}
