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
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
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
}

// BatchGetResponse answers a batchGet: one result per requested key, in
// order; a miss has found=false and no values.
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

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/predictions/{namespace}/{key}", s.api("get", s.handleGet))
	mux.Handle("POST /v1/predictions/{op}", s.api("post", s.handlePost))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	s.mux = mux
}

// reqInfo carries what a handler learned to the access log and metrics.
type reqInfo struct {
	endpoint  string
	namespace string
	source    string
	status    int
	bytes     int
}

type infoWriter struct {
	http.ResponseWriter
	info *reqInfo
}

func (w *infoWriter) WriteHeader(code int) {
	if w.info.status == 0 {
		w.info.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *infoWriter) Write(b []byte) (int, error) {
	if w.info.status == 0 {
		w.info.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.info.bytes += n
	return n, err
}

type infoKey struct{}

func infoOf(ctx context.Context) *reqInfo {
	if ri, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

// api wraps an API handler with, in order: access log and metrics, auth,
// in-flight shedding, the request timeout and the body limit.
func (s *Server) api(endpoint string, h func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{endpoint: endpoint}
		iw := &infoWriter{ResponseWriter: w, info: info}
		defer func() { s.logRequest(r, info, start) }()

		if !s.authorized(r) {
			iw.Header().Set("WWW-Authenticate", `Bearer realm="precog"`)
			writeError(iw, http.StatusUnauthorized, "missing or invalid bearer token")
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.metrics.shed.Inc()
			iw.Header().Set("Retry-After", "1")
			writeError(iw, http.StatusTooManyRequests, "too many requests in flight; retry later")
			return
		}
		s.metrics.inFlight.Inc()
		defer func() {
			<-s.slots
			s.metrics.inFlight.Dec()
		}()
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		ctx = context.WithValue(ctx, infoKey{}, info)
		r = r.WithContext(ctx)
		r.Body = http.MaxBytesReader(iw, r.Body, s.cfg.MaxBodyBytes)
		h(iw, r)
	})
}

// authorized compares the bearer token with every configured token in
// constant time (hashes make the lengths equal; no early exit).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.InsecureNoAuth {
		return true
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
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
		src = "error"
		if info.status == http.StatusNotFound {
			src = "miss"
		}
	}
	ep := info.endpoint
	s.metrics.latency.WithLabelValues(ep, src).Observe(d.Seconds())
	s.metrics.responses.WithLabelValues(ep, strconv.Itoa(info.status)).Inc()
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeErr maps an error to its status: 400 for bad requests, 413 for an
// oversized body, 504 for the request timeout, else 500.
func writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var br *badRequest
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, br.msg)
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil:
		writeError(w, http.StatusGatewayTimeout, "request timed out")
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

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	info := infoOf(r.Context())
	n := s.namespace(w, r.PathValue("namespace"))
	if n == nil {
		return
	}
	info.namespace = n.name
	key := r.PathValue("key")
	if err := s.limits().checkKey("path key", key); err != nil {
		writeErr(w, r, err)
		return
	}
	preds, err := s.resolve(r.Context(), n, []string{key}, nil)
	if err != nil {
		writeErr(w, r, err)
		return
	}
	p := preds[0]
	if p.Source == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no prediction for key %q in namespace %q", key, n.name))
		return
	}
	info.source = p.Source
	p.Namespace = n.name
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handlePost(w http.ResponseWriter, r *http.Request) {
	info := infoOf(r.Context())
	op := r.PathValue("op")
	i := strings.LastIndexByte(op, ':')
	if i < 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such operation %q: want {namespace}:batchGet or {namespace}:predict", op))
		return
	}
	name, verb := op[:i], op[i+1:]
	switch verb {
	case "batchGet":
		info.endpoint = "batchGet"
	case "predict":
		info.endpoint = "predict"
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such operation %q: want batchGet or predict", verb))
		return
	}
	n := s.namespace(w, name)
	if n == nil {
		return
	}
	info.namespace = n.name
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeErr(w, r, err)
		return
	}
	if verb == "batchGet" {
		s.batchGet(w, r, n, body)
	} else {
		s.predict(w, r, n, body)
	}
}

func (s *Server) batchGet(w http.ResponseWriter, r *http.Request, n *namespace, body []byte) {
	req, err := decodeBatchGet(body, s.limits())
	if err != nil {
		writeErr(w, r, err)
		return
	}
	preds, err := s.resolve(r.Context(), n, req.Keys, nil)
	if err != nil {
		writeErr(w, r, err)
		return
	}
	src := ""
	for i := range preds {
		found := preds[i].Source != ""
		preds[i].Found = &found
		switch {
		case src == "":
			src = preds[i].Source
		case preds[i].Source != src:
			src = "mixed"
		}
	}
	if src == "" {
		src = "miss"
	}
	infoOf(r.Context()).source = src
	writeJSON(w, http.StatusOK, BatchGetResponse{Namespace: n.name, Results: preds})
}

func (s *Server) predict(w http.ResponseWriter, r *http.Request, n *namespace, body []byte) {
	req, err := decodePredict(body, s.limits())
	if err != nil {
		writeErr(w, r, err)
		return
	}
	var rw *row
	if req.Inputs != nil || req.Columns != nil {
		if n.live == nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("namespace %q has live inference off (serving.live: false)", n.name))
			return
		}
		x, err := n.layout.rowFromPredict(req)
		if err != nil {
			writeErr(w, r, err)
			return
		}
		rw = &x
	}
	preds, err := s.resolve(r.Context(), n, []string{req.Key}, rw)
	if err != nil {
		writeErr(w, r, err)
		return
	}
	p := preds[0]
	if p.Source == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no prediction for key %q in namespace %q and no inputs to compute one", req.Key, n.name))
		return
	}
	infoOf(r.Context()).source = p.Source
	p.Namespace = n.name
	writeJSON(w, http.StatusOK, p)
}

// resolve answers keys through the fallback chain Redis → Postgres → live.
// A key no step answers has an empty Source. in, when set, is the live
// input row of a single-key predict.
func (s *Server) resolve(ctx context.Context, n *namespace, keys []string, in *row) ([]Prediction, error) {
	preds := make([]Prediction, len(keys))
	for i, k := range keys {
		preds[i].Key = k
	}
	missing := make([]int, 0, len(keys))
	for i := range keys {
		missing = append(missing, i)
	}
	fill := func(i int, rec []byte, source string) {
		values, version, at, err := splitRecord(rec)
		if err != nil {
			s.cfg.Logger.Warn("unreadable stored record", "namespace", n.name, "key", keys[i], "source", source, "err", err)
			return
		}
		preds[i].Values, preds[i].ModelVersion, preds[i].ComputedAt, preds[i].Source = values, version, at, source
	}
	rest := func() []string {
		left := missing[:0]
		for _, i := range missing {
			if preds[i].Source == "" {
				left = append(left, i)
			}
		}
		missing = left
		ks := make([]string, len(missing))
		for j, i := range missing {
			ks[j] = keys[i]
		}
		return ks
	}

	if n.redis != nil {
		sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		recs, live, err := n.redis.get(sctx, keys, n.writebackTTL > 0)
		cancel()
		if err != nil {
			s.storeFailed(ctx, n, "redis", err)
		} else {
			for i, rec := range recs {
				if rec != nil {
					src := SourceRedis
					if live[i] {
						src = SourceLive
					}
					fill(i, rec, src)
				}
			}
		}
	}
	if ks := rest(); len(ks) > 0 && n.pg != nil {
		sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		rows, err := n.pg.rows(sctx, ks, nil, "computed_at")
		cancel()
		if err != nil {
			s.storeFailed(ctx, n, "postgres", err)
		} else {
			for _, i := range missing {
				if m, ok := rows[keys[i]]; ok {
					s.fillPG(n, &preds[i], m)
				}
			}
		}
	}
	if ks := rest(); len(ks) > 0 && n.live != nil {
		if err := s.resolveLive(ctx, n, keys, missing, in, fill); err != nil {
			return nil, err
		}
	}
	for i := range preds {
		src := preds[i].Source
		if src == "" {
			src = "miss"
		}
		s.metrics.lookups.WithLabelValues(n.name, src).Inc()
	}
	return preds, ctx.Err()
}

func (s *Server) storeFailed(ctx context.Context, n *namespace, store string, err error) {
	s.metrics.storeErrors.WithLabelValues(n.name, store).Inc()
	s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "store step failed; falling through",
		slog.String("namespace", n.name), slog.String("store", store), slog.String("err", err.Error()))
}

// fillPG turns a row of the job's Postgres view into a prediction.
func (s *Server) fillPG(n *namespace, p *Prediction, m map[string]any) {
	values := make(map[string]json.RawMessage, len(m))
	for col, v := range m {
		switch col {
		case "model_version":
			p.ModelVersion, _ = v.(string)
			continue
		case "computed_at":
			if t, ok := v.(time.Time); ok {
				p.ComputedAt = t.UTC().Format(time.RFC3339Nano)
			}
			continue
		}
		b, err := pgJSON(nil, v)
		if err != nil {
			s.cfg.Logger.Warn("unreadable Postgres value", "namespace", n.name, "key", p.Key, "column", col, "err", err)
			return
		}
		values[col] = b
	}
	p.Values, p.Source = values, SourcePostgres
}

// resolveLive computes the missing keys live: from the request's inputs
// (predict) or from the features table (get, batchGet).
func (s *Server) resolveLive(ctx context.Context, n *namespace, keys []string, missing []int, in *row, fill func(int, []byte, string)) error {
	rows := make(map[int]row, len(missing))
	if in != nil {
		rows[missing[0]] = *in
	} else if n.features != nil {
		ks := make([]string, len(missing))
		for j, i := range missing {
			ks[j] = keys[i]
		}
		sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		feats, err := n.features.rows(sctx, ks, n.layout.colNamesList(), "")
		cancel()
		if err != nil {
			s.storeFailed(ctx, n, "features", err)
			return nil
		}
		for _, i := range missing {
			m, ok := feats[keys[i]]
			if !ok {
				continue
			}
			rw, err := n.layout.rowFromFeatures(keys[i], m)
			if err != nil {
				s.cfg.Logger.Warn("unusable features", "namespace", n.name, "key", keys[i], "err", err)
				continue
			}
			rows[i] = rw
		}
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
			rec, err := n.live.predict(ctx, rw)
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
		fill(res.i, res.rec, SourceLive)
		if n.writebackTTL > 0 && n.redis != nil {
			s.writeBack(n, keys[res.i], res.rec)
		}
	}
	if firstErr != nil && in != nil {
		return firstErr
	}
	if firstErr != nil {
		// get/batchGet: a failed live inference is a miss, not a failed request.
		s.cfg.Logger.Warn("live inference failed; answering a miss", "namespace", n.name, "err", firstErr)
	}
	return nil
}

// writeBack stores a live result in Redis off the request path.
func (s *Server) writeBack(n *namespace, key string, rec []byte) {
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

// handleReady reports 200 when every namespace has a working read path (a
// reachable store, or a loaded model for live inference) and 503 otherwise,
// with each check's result. One store down is not "not ready": the
// fallback chain is there to serve through it.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ready := true
	redisOK := map[*redisConn]error{}
	for _, name := range s.names {
		n := s.ns[name]
		usable := false
		if n.redis != nil {
			err, seen := redisOK[n.redis.conn]
			if !seen {
				err = n.redis.conn.client.Ping(ctx).Err()
				redisOK[n.redis.conn] = err
			}
			checks[name+"/redis"] = status(err)
			usable = usable || err == nil
		}
		if n.pg != nil {
			err := n.pg.pool.Ping(ctx)
			checks[name+"/postgres"] = status(err)
			usable = usable || err == nil
		}
		if n.live != nil {
			checks[name+"/model"] = "ok: " + n.model.Version()
			usable = true
		}
		if !usable {
			ready = false
		}
	}
	code := http.StatusOK
	if !ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}{ready, checks})
}

func status(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}
