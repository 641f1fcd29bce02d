package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/precog-ml/precog/sinks"
)

// lockReleaseTimeout bounds giving the sinks' writer locks back.
const lockReleaseTimeout = 10 * time.Second

// LockSinks takes every sink's writer lock for holder: the one way precog
// takes them (a local run holds them for the run, a worker's publish and
// publish --accept for the publish, gc while it removes, a rollback while
// it switches). The returned context is cancelled, with the cause, as soon
// as any lock is lost (its lease lapsed or another holder took it over),
// so that whatever runs under it stops before it writes again; release
// gives every lock back. Each lock is a lease of holder.Lease (0: the
// sinks' default; a cluster publisher passes its ledger lease, so that
// once it freezes its targets lapse with its publish step and another
// worker takes both over). A target another writer holds fails with an
// error wrapping its *sinks.LockedError.
func LockSinks(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo, holder sinks.Holder) (context.Context, func(), error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var held []sinks.Lock
	release := func() {
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		defer rcancel()
		for _, l := range held {
			_ = l.Release(rctx)
		}
	}
	for _, s := range snks {
		l, err := s.Lock(ctx, info, holder)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("sink %s: %w", s.Name(), err)
		}
		held = append(held, l)
		go func(name string) {
			select {
			case <-l.Lost():
				cancel(fmt.Errorf("sink %s: writer lock lost; stopped writing so that another writer's data is not overwritten", name))
			case <-ctx.Done():
			}
		}(s.Name())
	}
	return ctx, release, nil
}
