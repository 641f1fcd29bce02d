package lookup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// Sources a prediction can come from.
const (
	SourceRedis    = "redis"
	SourcePostgres = "postgres"
	SourceLive     = "live"
)

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
