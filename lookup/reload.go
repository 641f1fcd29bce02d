package lookup

import (
	"context"
	"fmt"
	"time"
)

// loadModel loads n's model and derives its request layout.
func (s *Server) loadModel(n *namespace, file string) (LiveModel, *layout, error) {
	load := s.cfg.LoadModel
	if load == nil {
		load = loadRunnerModel
	}
	m, err := load(n.spec)
	if err != nil {
		return nil, nil, fmt.Errorf("lookup: %s: model.path: %w", file, err)
	}
	l, err := newLayout(n.spec, m.Info())
	if err != nil {
		_ = m.Close()
		return nil, nil, fmt.Errorf("lookup: %s: %w", file, err)
	}
	return m, l, nil
}

// newLive starts live inference for n with model m. Twice as many batches
// as the model has sessions run at once: while one batch holds a session,
// another builds its input record and encodes it, or writes its records
// and wakes its callers, so a session never waits on that work. The
// model's session pool, not the batcher, bounds the inferences at once.
func (s *Server) newLive(n *namespace, l *layout, m LiveModel) *live {
	sizes := s.metrics.liveBatch.WithLabelValues(n.name) // resolved once, not per batch
	return newLive(n.name, l, m, liveBatching{
		maxBatch: s.cfg.LiveBatchSize, maxWait: s.cfg.LiveBatchWait, concurrency: 2 * max(n.spec.Model.Sessions, 1),
		onBatch: func(size int) { sizes.Observe(float64(size)) },
	})
}

// reloader checks n's model each time a new version is published, until
// ctx ends.
func (s *Server) reloader(ctx context.Context, n *namespace) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.reload:
			s.reloadModel(n)
		}
	}
}

// reloadModel loads the model at the spec's model.path, as the batch job
// that just published did, and swaps it in when its version differs from
// the one in service, so that live answers come from the model that
// computed the published records. The new model is fully loaded (sessions
// started, layout checked) before the swap, so no request ever sees a
// half-loaded one; a model that fails to load leaves the old one serving.
// The old one is released once every request that may hold it has ended.
func (s *Server) reloadModel(n *namespace) {
	old := n.live.Load()
	m, l, err := s.loadModel(n, specName(n.spec))
	if err != nil {
		s.cfg.Logger.Warn("a new version was published but its model does not load; live inference keeps the old model",
			"namespace", n.name, "model", old.model.Version(), "err", err)
		return
	}
	if m.Version() == old.model.Version() {
		_ = m.Close()
		return
	}
	n.live.Store(s.newLive(n, l, m))
	s.cfg.Logger.Info("live model reloaded after publish", "namespace", n.name, "from", old.model.Version(), "to", m.Version())
	s.retire(old)
}

// retire releases a replaced live model after the longest a request that
// loaded it can still use it: a request ends within RequestTimeout, and
// an inference it shared within RequestTimeout of its start. At Close it
// is released at once (requests are over by then).
func (s *Server) retire(lv *live) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTimer(2*s.cfg.RequestTimeout + time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
		_ = lv.release()
	}()
}
