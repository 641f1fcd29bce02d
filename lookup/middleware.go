package lookup

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"
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
