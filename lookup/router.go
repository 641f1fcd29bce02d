package lookup

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes builds the handlers ServeHTTP dispatches to.
func (s *Server) routes() {
	s.getH = s.api("get", s.handleGet)
	s.postH = s.api("post", s.handlePost)
	s.metricsH = promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	s.nsH = s.api("namespace", s.handleNamespace)
}

const predictionsPrefix = "/v1/predictions/"

// ServeHTTP routes by hand rather than with http.ServeMux: the mux cleans
// paths (a key of ".." or "a/../b" would be redirected elsewhere) and answers
// 404 and 405 in plain text, while every answer of this API is JSON.
//
// Routes: GET /v1/predictions/{namespace}/{key} (the key is the rest of the
// path, unescaped, slashes included), POST /v1/predictions/{namespace}:{op},
// GET /v1/namespaces/{namespace}, /healthz, /readyz, /metrics. HEAD is served wherever GET is.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(path, predictionsPrefix); ok {
		s.routePredictions(w, r, rest)
		return
	}
	if rest, ok := strings.CutPrefix(path, namespacesPrefix); ok {
		s.routeNamespaces(w, r, rest)
		return
	}
	var h http.Handler
	switch path {
	case "/healthz":
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ok\n")
		})
	case "/readyz":
		h = http.HandlerFunc(s.handleReady)
	case "/metrics":
		h = s.metricsH
	default:
		writeError(w, http.StatusNotFound, "no such endpoint (want /v1/predictions/{namespace}/{key}, /v1/predictions/{namespace}:batchGet or :predict, /v1/namespaces/{namespace}, /healthz, /readyz, /metrics)")
		return
	}
	if !isGet(r.Method) {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	h.ServeHTTP(w, r)
}

func isGet(method string) bool { return method == http.MethodGet || method == http.MethodHead }

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method not allowed here (allowed: "+allow+")")
}

// routePredictions dispatches /v1/predictions/{rest}: a rest with a slash
// is {namespace}/{key} (GET), one without is {namespace}:{op} (POST).
func (s *Server) routePredictions(w http.ResponseWriter, r *http.Request, rest string) {
	nsEsc, keyEsc, isKey := strings.Cut(rest, "/")
	if !isKey {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, "POST")
			return
		}
		op, err := url.PathUnescape(rest)
		if err != nil {
			writeError(w, http.StatusBadRequest, "malformed path: bad %-escape in the operation")
			return
		}
		s.postH(w, r, route{op: op})
		return
	}
	if !isGet(r.Method) {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	ns, err1 := url.PathUnescape(nsEsc)
	key, err2 := url.PathUnescape(keyEsc)
	if err1 != nil || err2 != nil {
		writeError(w, http.StatusBadRequest, "malformed path: bad %-escape in the namespace or key")
		return
	}
	s.getH(w, r, route{namespace: ns, key: key})
}

// bodyReadError maps a failure to read the request body to its answer: 413
// past the body limit, 408 when the client sent it too slowly (the server's
// read deadline), else 400. The messages never carry the socket error,
// which names the server's and the client's addresses.
func bodyReadError(err error) (int, string) {
	var tooBig *http.MaxBytesError
	var ne interface{ Timeout() bool }
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return http.StatusRequestTimeout, "request body not received in time"
	default:
		return http.StatusBadRequest, "could not read the request body (connection closed or body shorter than its Content-Length)"
	}
}
