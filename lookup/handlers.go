package lookup

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/precog-ml/precog/internal/jsontext"
	"github.com/precog-ml/precog/jobs"
)

// Prediction is one answered key, as the API returns it.
type Prediction struct {
	Namespace    string                     `json:"namespace,omitempty"`
	Key          string                     `json:"key"`
	Found        *bool                      `json:"found,omitempty"`
	Values       map[string]json.RawMessage `json:"values,omitempty"`
	ModelVersion string                     `json:"model_version,omitempty"`
	ComputedAt   string                     `json:"computed_at,omitempty"`
	Source       string                     `json:"source,omitempty"`
	// Status and Error are set in batchGet results only: "found", "miss"
	// (no store holds the key), "unavailable" (a store that may hold it
	// failed: Error says which and why; retry later) or "error" (the key
	// alone was refused, e.g. empty: Error says why).
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// AgeSeconds (found batchGet results) is the record's age from its
	// computed_at; Stale, when the job has max_staleness, whether it is
	// older than that.
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
	Stale      *bool    `json:"stale,omitempty"`
}

// BatchGetResponse answers a batchGet: one result per requested key, in
// order, each with its own status; a miss or an unavailable key has
// found=false and no values.
type BatchGetResponse struct {
	Namespace string       `json:"namespace"`
	Results   []Prediction `json:"results"`
}

// Sources a prediction can come from.
const (
	SourceRedis    = "redis"
	SourcePostgres = "postgres"
	SourceLive     = "live"
)

func hashToken(t string) [32]byte { return sha256.Sum256([]byte(t)) }

// reqInfo carries what a handler learned to the access log and metrics.
// It is also the handler's ResponseWriter, so one allocation covers both.
type reqInfo struct {
	http.ResponseWriter
	endpoint  *endpointMetrics
	namespace string
	source    string
	status    int
	bytes     int
}

func (w *reqInfo) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *reqInfo) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// apiHandler is an API endpoint behind the api wrapper: ctx carries the
// request timeout, info collects what the access log and metrics report,
// p is what the router read from the path.
type apiHandler func(ctx context.Context, w *reqInfo, r *http.Request, p route)

// route is what the router read from a prediction path: the namespace and
// key of a GET, the {namespace}:{verb} of a POST. Passed to the handler
// directly: Request.SetPathValue allocates a map per request.
type route struct{ namespace, key, op string }

// apiFunc is an API endpoint wrapped by api, called by the router.
type apiFunc func(w http.ResponseWriter, r *http.Request, p route)

// api wraps an API handler with, in order: access log and metrics, auth,
// in-flight shedding, the request timeout and the body limit.
func (s *Server) api(endpoint string, h apiHandler) apiFunc {
	em := s.metrics.endpoints[endpoint]
	return func(w http.ResponseWriter, r *http.Request, p route) {
		start := time.Now()
		info := &reqInfo{ResponseWriter: w, endpoint: em}
		defer s.logRequest(r, info, start)

		if !s.authorized(r) {
			info.Header().Set("WWW-Authenticate", `Bearer realm="precog"`)
			writeError(info, http.StatusUnauthorized, "missing or invalid bearer token")
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.metrics.shed.Inc()
			info.Header().Set("Retry-After", "1")
			writeError(info, http.StatusTooManyRequests, "too many requests in flight; retry later")
			return
		}
		s.metrics.inFlight.Inc()
		defer func() {
			<-s.slots
			s.metrics.inFlight.Dec()
		}()
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		if r.Method != http.MethodGet {
			r.Body = http.MaxBytesReader(info, r.Body, s.cfg.MaxBodyBytes)
		}
		h(ctx, info, r, p)
	}
}

// authorized compares the bearer token with every configured token in
// constant time (hashes make the lengths equal; no early exit).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.InsecureNoAuth {
		return true
	}
	// The scheme is case-insensitive (RFC 7235 §2.1), one or more spaces
	// before the token.
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimLeft(tok, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return false
	}
	got := hashToken(tok)
	match := 0
	for i := range s.tokens {
		match |= subtle.ConstantTimeCompare(got[:], s.tokens[i][:])
	}
	return match == 1
}

func (s *Server) logRequest(r *http.Request, info *reqInfo, start time.Time) {
	d := time.Since(start)
	if info.status == 0 {
		info.status = http.StatusOK
	}
	src := info.source
	if src == "" {
		switch info.status {
		case http.StatusNotFound:
			src = "miss"
		case http.StatusServiceUnavailable:
			src = "unavailable"
		default:
			src = "error"
		}
	}
	info.endpoint.observe(src, info.status, d.Seconds())
	level := slog.LevelDebug
	if s.cfg.AccessLog || info.status >= 500 {
		level = slog.LevelInfo
	}
	if !s.cfg.Logger.Enabled(r.Context(), level) {
		return
	}
	// Never the Authorization header, nor the body (it may carry features).
	s.cfg.Logger.LogAttrs(r.Context(), level, "request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", info.status),
		slog.String("namespace", info.namespace),
		slog.String("source", info.source),
		slog.Int("bytes", info.bytes),
		slog.Duration("duration", d),
		slog.String("remote", r.RemoteAddr),
	)
}

// jsonContentType is shared by every response: setting the header map
// entry directly skips canonicalising the name and allocating the slice.
var jsonContentType = []string{"application/json"}

// bufPool recycles response buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeBody sends a JSON body built in b, with its length (so that a large
// batchGet answer is not sent chunked).
func writeBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	writeBody(w, status, append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	writeBody(w, status, append(b, '\n'))
}

// errUnavailable marks an answer that a failed store step may have held:
// the request is answered 503 (retry), never a miss, because the data may
// exist in the store that could not be read.
type errUnavailable struct{ cause error }

func (e *errUnavailable) Error() string {
	return "no store could answer (a store step failed, so this is not a miss): " + e.cause.Error()
}

func (e *errUnavailable) Unwrap() error { return e.cause }

// writeErr maps an error to its status: 400 for bad requests, 413 for an
// oversized body, 503 when a failed store left keys unanswered, 504 for
// the request timeout, else 500.
func writeErr(ctx context.Context, w http.ResponseWriter, err error) {
	var br *badRequest
	var tooBig *http.MaxBytesError
	var unavail *errUnavailable
	switch {
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, br.msg)
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		writeError(w, http.StatusGatewayTimeout, "request timed out")
	case errors.As(err, &unavail):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, unavail.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func (s *Server) namespace(w http.ResponseWriter, name string) *namespace {
	n := s.ns[name]
	if n == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown namespace %q (have: %s)", name, strings.Join(s.names, ", ")))
	}
	return n
}

func (s *Server) limits() keyLimits {
	return keyLimits{maxKeyLen: s.cfg.MaxKeyLen, maxKeys: s.cfg.MaxKeysPerBatch}
}

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

func (s *Server) handlePost(ctx context.Context, w *reqInfo, r *http.Request, p route) {
	op := p.op
	i := strings.LastIndexByte(op, ':')
	if i < 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such operation %q: want {namespace}:batchGet or {namespace}:predict", op))
		return
	}
	name, verb := op[:i], op[i+1:]
	switch verb {
	case "batchGet", "predict":
		w.endpoint = s.metrics.endpoints[verb]
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such operation %q: want batchGet or predict", verb))
		return
	}
	n := s.namespace(w, name)
	if n == nil {
		return
	}
	w.namespace = n.name
	body, err := io.ReadAll(r.Body)
	if err != nil {
		code, msg := bodyReadError(err)
		writeError(w, code, msg)
		return
	}
	if verb == "batchGet" {
		s.batchGet(ctx, w, n, body)
	} else {
		s.predict(ctx, w, n, body)
	}
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

func (s *Server) predict(ctx context.Context, w *reqInfo, n *namespace, body []byte) {
	req, err := decodePredict(body, s.limits())
	if err != nil {
		writeErr(ctx, w, err)
		return
	}
	var rw *row
	lv := n.live.Load()
	if req.Inputs != nil || req.Columns != nil || req.Text != nil {
		if lv == nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("namespace %q has live inference off (serving.live: false)", n.name))
			return
		}
		x, err := lv.layout.rowFromPredict(req)
		if err != nil {
			writeErr(ctx, w, err)
			return
		}
		rw = &x
	}
	s.answerOne(ctx, w, oneKey{n: n, lv: lv, key: req.Key, in: rw, why: " and no inputs to compute one"})
}

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

func (l *layout) colNamesList() []string {
	s := make([]string, len(l.cols))
	for i, c := range l.cols {
		s[i] = c.name
	}
	return s
}

func status(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// StaleAgeHeader carries the age in seconds of a served record older than
// its job's max_staleness: precomputed predictions go stale silently, this
// makes it visible to the application.
const StaleAgeHeader = "X-Precog-Stale-Age"

// markStale sets StaleAgeHeader when the record's computed_at (raw JSON
// value) is older than spec's max_staleness.
func markStale(w http.ResponseWriter, spec *jobs.Spec, computedAt []byte, now time.Time) {
	if spec == nil || spec.MaxStaleness.Duration <= 0 {
		return
	}
	if age, ok := recordAge(computedAt, now); ok && age > spec.MaxStaleness.Duration {
		w.Header().Set(StaleAgeHeader, strconv.FormatInt(int64(age.Seconds()), 10))
	}
}
