package lookup

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

func (s *Server) handleGet(ctx context.Context, w *reqInfo, _ *http.Request, p route) {
	n := s.namespace(w, p.namespace)
	if n == nil {
		return
	}
	w.namespace = n.name
	key := p.key
	if err := s.limits().checkKey("path key", key); err != nil {
		writeErr(ctx, w, err)
		return
	}
	s.answerOne(ctx, w, oneKey{n: n, lv: n.live.Load(), key: key})
}

// answerOne resolves one key and writes it as a Prediction, or the 404 of
// a key no store holds (in, the live inputs of a predict, or nil; why
// ends the 404 message).
// oneKey is a single-key request: its namespace, live model (nil: live
// off), key, live inputs (predict) and what ends its 404 message.
type oneKey struct {
	n   *namespace
	lv  *live
	key string
	in  *row
	why string
}

func (s *Server) answerOne(ctx context.Context, w *reqInfo, q oneKey) {
	n, lv, key, in, why := q.n, q.lv, q.key, q.in, q.why
	keys := [1]string{key}
	var ans [1]answer
	if err := s.resolve(ctx, n, lv, keys[:], in, ans[:]); err != nil {
		writeErr(ctx, w, err)
		return
	}
	a := ans[0]
	if a.bad != nil {
		writeErr(ctx, w, a.bad)
		return
	}
	if a.source == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no prediction for key %q in namespace %q%s", key, n.name, why))
		return
	}
	var spans [16]span
	p, err := splitRecord(a.rec, spans[:])
	if err != nil {
		writeErr(ctx, w, fmt.Errorf("namespace %s, key %q, from %s: %w", n.name, key, a.source, err))
		return
	}
	w.source = a.source
	markStale(w, n.spec, p.caVal, time.Now())
	bp := bufPool.Get().(*[]byte)
	b := appendPrediction((*bp)[:0], n.name, key, nil, a, &p)
	writeBody(w, http.StatusOK, append(b, '\n'))
	*bp = b
	bufPool.Put(bp)
}
