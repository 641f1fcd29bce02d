package lookup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/precog-ml/precog/internal/jsontext"
)

// BatchGetResponse answers a batchGet: one result per requested key, in
// order, each with its own status; a miss or an unavailable key has
// found=false and no values.
type BatchGetResponse struct {
	Namespace string       `json:"namespace"`
	Results   []Prediction `json:"results"`
}

// Per-key statuses of a batchGet result.
const (
	statusFound       = "found"
	statusMiss        = "miss"
	statusUnavailable = "unavailable"
	// statusError: the key alone was refused (empty, too long, not a
	// string or integer); "error" says why and the other keys are answered.
	statusError = "error"
)

// batchGet answers each key on its own: a key is found, a miss (every
// store answered and none holds it), or unavailable (a store that may hold
// it failed; "error" says which and why, and a retry may find it). The
// answer is 200 when any key was answered either way, 503 only when every
// key is unavailable, so one failing store does not fail the keys another
// store answered.
func (s *Server) batchGet(ctx context.Context, w *reqInfo, n *namespace, body []byte) {
	req, err := decodeBatchGet(body, s.limits())
	if err != nil {
		writeErr(ctx, w, err)
		return
	}
	ans := make([]answer, len(req.Keys))
	var unavail *errUnavailable
	if err := s.resolveGood(ctx, n, req, ans); err != nil && !errors.As(err, &unavail) {
		writeErr(ctx, w, err)
		return
	}
	now := time.Now()
	var unavailMsg []byte
	if unavail != nil {
		unavailMsg = jsontext.AppendString(nil, unavail.Error())
	}
	src, answered := "", 0
	var spans [16]span
	bp := bufPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"namespace":`...)
	b = jsontext.AppendString(b, n.name)
	b = append(b, `,"results":[`...)
	for i, a := range ans {
		if i > 0 {
			b = append(b, ',')
		}
		var p recordParts
		if a.source != "" && a.bad == nil {
			if p, err = splitRecord(a.rec, spans[:]); err != nil {
				*bp = b
				bufPool.Put(bp)
				writeErr(ctx, w, fmt.Errorf("namespace %s, key %q, from %s: %w", n.name, req.Keys[i], a.source, err))
				return
			}
		}
		found := a.source != "" && a.bad == nil
		shown := a
		if !found {
			shown = answer{}
		}
		b = appendPrediction(b, "", req.Keys[i], &found, shown, &p)
		// The object appendPrediction closed gets the key's status.
		b = append(b[:len(b)-1], `,"status":"`...)
		switch {
		case req.KeyErrs != nil && req.KeyErrs[i] != nil:
			b = append(b, statusError+`","error":`...)
			b = append(jsontext.AppendString(b, req.KeyErrs[i].Error()), '}')
			a.source = "error"
			answered++
		case a.bad != nil:
			b = append(b, statusError+`","error":`...)
			b = append(jsontext.AppendString(b, a.bad.Error()), '}')
			a.source = "error"
			answered++
		case found:
			b = append(b, statusFound+`"`...)
			b = append(appendAge(b, n.spec, p.caVal, now), '}')
			answered++
		case unavail != nil:
			b = append(b, statusUnavailable+`","error":`...)
			b = append(append(b, unavailMsg...), '}')
			a.source = "unavailable"
		default:
			b = append(b, statusMiss+`"}`...)
			answered++
		}
		switch {
		case src == "":
			src = a.source
		case a.source != src:
			src = "mixed"
		}
	}
	b = append(b, "]}\n"...)
	if src == "" {
		src = "miss"
	}
	w.source = src
	code := http.StatusOK
	if answered == 0 {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeBody(w, code, b)
	*bp = b
	bufPool.Put(bp)
}

// resolveGood resolves the batch's good keys into ans; keys refused on
// their own (req.KeyErrs) are left unanswered, for their "error" result.
func (s *Server) resolveGood(ctx context.Context, n *namespace, req batchGetRequest, ans []answer) error {
	if req.KeyErrs == nil {
		return s.resolve(ctx, n, n.live.Load(), req.Keys, nil, ans)
	}
	var keys []string
	var at []int
	for i, err := range req.KeyErrs {
		if err == nil {
			keys = append(keys, req.Keys[i])
			at = append(at, i)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sub := make([]answer, len(keys))
	err := s.resolve(ctx, n, n.live.Load(), keys, nil, sub)
	for j, i := range at {
		ans[i] = sub[j]
	}
	return err
}
