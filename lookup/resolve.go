package lookup

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// resolve answers keys into ans (len(ans) == len(keys)) through the
// fallback chain Redis → Postgres → live. A key no step answers has an
// empty source. in, when set, is the live input row of a single-key
// predict, built with lv's layout; lv is the live model the request uses
// (nil: live off). When a store step failed and keys stay unanswered, the error is
// an *errUnavailable: those keys may exist in the store that failed.
func (s *Server) resolve(ctx context.Context, n *namespace, lv *live, keys []string, in *row, ans []answer) error {
	q := lookupReq{n: n, lv: lv, keys: keys, in: in, ans: ans}
	var one [1]int // missing's storage for a single key: no allocation
	if len(keys) == 1 {
		q.missing = one[:1]
	} else {
		q.missing = make([]int, len(keys))
	}
	for i := range q.missing {
		q.missing[i] = i
	}
	// failed is a failed store step; it stays out of q, whose
	// arrays would otherwise leave the stack with the error it becomes.
	var failed error
	if n.redis != nil {
		failed = s.redisStep(ctx, &q)
	}
	if q.missing = unanswered(ans, q.missing); len(q.missing) > 0 && n.pg != nil {
		if err := s.postgresStep(ctx, &q, keysAt(keys, q.missing)); err != nil {
			failed = err // the later step's failure is the one to report
		}
	}
	if q.missing = unanswered(ans, q.missing); len(q.missing) > 0 && lv != nil {
		if err := s.resolveLive(ctx, n, lv, liveStep{keys: keys, missing: q.missing, in: in, ans: ans}); err != nil {
			return err
		}
	}
	return q.tally(ctx, failed)
}

// lookupReq is one request's keys on their way down the fallback chain:
// each key's answer and the indexes still unanswered.
type lookupReq struct {
	n       *namespace
	lv      *live // nil: live off
	keys    []string
	in      *row // the live inputs of a single-key predict, or nil
	ans     []answer
	missing []int
}

// unanswered drops answered keys from missing, in place, and returns it.
// A function of its arguments rather than a method storing into the
// request: a store through a pointer would move the request's arrays to
// the heap.
func unanswered(ans []answer, missing []int) []int {
	left := missing[:0]
	for _, i := range missing {
		if ans[i].source == "" {
			left = append(left, i)
		}
	}
	return left
}

// keysAt returns keys[i] for each i of idx.
func keysAt(keys []string, idx []int) []string {
	ks := make([]string, len(idx))
	for j, i := range idx {
		ks[j] = keys[i]
	}
	return ks
}

// redisStep reads every key from Redis; the error is the step's failure.
func (s *Server) redisStep(ctx context.Context, q *lookupReq) error {
	n := q.n
	// Without a later step that could answer, a slow Redis gets the whole
	// request budget: a fall-through would only turn a hit into a
	// spurious miss.
	sctx, cancel := ctx, context.CancelFunc(nil)
	if n.pg != nil || (q.lv != nil && (q.in != nil || n.features != nil)) {
		sctx, cancel = context.WithTimeout(ctx, s.cfg.StoreTimeout)
	}
	var recs [][]byte
	var live []bool
	err := n.redis.conn.brk.allow()
	if err == nil {
		recs, live, err = n.redis.get(sctx, q.keys, n.writebackTTL > 0)
		stepDone(ctx, n.redis.conn.brk, err)
	}
	if cancel != nil {
		cancel()
	}
	if err != nil {
		s.storeFailed(ctx, n, "redis", err)
		return err
	}
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		src := SourceRedis
		if live[i] {
			src = SourceLive
		}
		if !isRecord(rec) {
			q.ans[i] = s.corrupt(n, q.keys[i], "redis", recordFault(rec))
			continue
		}
		q.ans[i] = answer{rec: rec, source: src}
	}
	return nil
}

// postgresStep reads the keys ks still missing from the Postgres view; the
// error is the step's failure.
func (s *Server) postgresStep(ctx context.Context, q *lookupReq, ks []string) error {
	n := q.n
	rows, err := s.pgStep(ctx, n.pg, ks, nil, jobs.ColComputedAt)
	if err != nil {
		s.storeFailed(ctx, n, "postgres", err)
		return err
	}
	for _, i := range q.missing {
		if m, ok := rows[q.keys[i]]; ok {
			rec, col, err := pgRecord(m)
			if err != nil {
				q.ans[i] = s.corrupt(n, q.keys[i], "postgres", fmt.Errorf("column %s: %w", col, err))
				continue
			}
			q.ans[i] = answer{rec: rec, source: SourcePostgres}
		}
	}
	return nil
}

// tally counts each key by source; keys left unanswered after a failed
// step (failed) are unavailable (an *errUnavailable), else misses.
func (q *lookupReq) tally(ctx context.Context, failed error) error {
	left := 0
	for i := range q.ans {
		src := q.ans[i].source
		if src == "" {
			left++
			continue
		}
		q.n.keys[src].Inc()
	}
	if left > 0 {
		if failed != nil && ctx.Err() == nil {
			q.n.keys["unavailable"].Add(float64(left))
			return &errUnavailable{cause: failed}
		}
		q.n.keys["miss"].Add(float64(left))
	}
	return ctx.Err()
}

// pgStep reads keys from t within the step timeout, through t's breaker.
func (s *Server) pgStep(ctx context.Context, t *pgTable, keys, cols []string, order string) (map[string]map[string]any, error) {
	if err := t.brk.allow(); err != nil {
		return nil, err
	}
	// The key type is a cold-start query, with its own budget and its own
	// account with the breaker: a slow first query is no store failure.
	isInt, err := t.keyIsInt(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	rows, err := t.rows(sctx, isInt, keys, cols, order)
	stepDone(ctx, t.brk, err)
	return rows, err
}

// storeFailed counts a failed store step and logs it, at most once a
// second per namespace: under an overload every request would log.
func (s *Server) storeFailed(ctx context.Context, n *namespace, store string, err error) {
	s.metrics.storeErrors.WithLabelValues(n.name, store).Inc()
	now := time.Now().UnixNano()
	last := n.lastWarn.Load()
	if now-last < int64(time.Second) || !n.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "store step failed; falling through",
		slog.String("namespace", n.name), slog.String("store", store), slog.String("err", err.Error()))
}

// liveStep is what resolveLive reads of a lookupReq. The namespace and
// live model are passed apart: they leak (to the batcher, to a write-back
// goroutine), and escape analysis, which does not tell a struct's fields
// apart, would move the request's key and answer arrays to the heap with
// them.
type liveStep struct {
	keys    []string
	missing []int
	in      *row
	ans     []answer
}

// resolveLive computes the missing keys live: from the request's inputs
// (predict) or from the features table (get, batchGet).
func (s *Server) resolveLive(ctx context.Context, n *namespace, lv *live, q liveStep) error {
	keys, missing, in, ans := q.keys, q.missing, q.in, q.ans
	if in != nil {
		rec, err := lv.predict(ctx, *in)
		if err != nil {
			return err
		}
		i := missing[0]
		ans[i] = answer{rec: rec, source: SourceLive}
		if n.writebackTTL > 0 && n.redis != nil {
			s.writeBack(n, keys[i], rec)
		}
		return nil
	}
	if n.features == nil {
		return nil
	}
	ks := make([]string, len(missing))
	for j, i := range missing {
		ks[j] = keys[i]
	}
	feats, err := s.pgStep(ctx, n.features, ks, lv.layout.colNamesList(), "")
	if err != nil {
		s.storeFailed(ctx, n, "features", err)
		return nil
	}
	rows := make(map[int]row, len(missing))
	for _, i := range missing {
		m, ok := feats[keys[i]]
		if !ok {
			continue
		}
		rw, err := lv.layout.rowFromFeatures(keys[i], m)
		if err != nil {
			s.cfg.Logger.Warn("unusable features", "namespace", n.name, "key", keys[i], "err", err)
			continue
		}
		rows[i] = rw
	}
	if len(rows) == 0 {
		return nil
	}
	type result struct {
		i   int
		rec []byte
		err error
	}
	results := make(chan result, len(rows))
	for i, rw := range rows {
		go func() {
			rec, err := lv.predict(ctx, rw)
			results <- result{i, rec, err}
		}()
	}
	var firstErr error
	for range rows {
		res := <-results
		if res.err != nil {
			if firstErr == nil {
				firstErr = res.err
			}
			continue
		}
		ans[res.i] = answer{rec: res.rec, source: SourceLive}
		if n.writebackTTL > 0 && n.redis != nil {
			s.writeBack(n, keys[res.i], res.rec)
		}
	}
	if firstErr != nil {
		// get/batchGet: a failed live inference is a miss, not a failed request.
		s.cfg.Logger.Warn("live inference failed; answering a miss", "namespace", n.name, "err", firstErr)
	}
	return nil
}

// writeBack stores a live result in Redis off the request path.
func (s *Server) writeBack(n *namespace, key string, rec []byte) {
	if n.redis.conn.brk.allow() != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
		defer cancel()
		if err := n.redis.writeBack(ctx, key, rec, n.writebackTTL); err != nil {
			s.metrics.storeErrors.WithLabelValues(n.name, "redis_writeback").Inc()
		}
	}()
}
