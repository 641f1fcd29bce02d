package lookup

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/jobs"
	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// namespacesPrefix is where GET /v1/namespaces/{namespace} lives.
const namespacesPrefix = "/v1/namespaces/"

// NamespaceInfo is the answer of GET /v1/namespaces/{namespace}: what
// readers of the namespace get now. The version, its publish time and its
// row count come from the Redis sink's bookkeeping ({ns}:current,
// {ns}:meta and the version's shard markers); a namespace without a Redis
// sink answers its job and stores only.
type NamespaceInfo struct {
	Namespace string `json:"namespace"`
	// Job is the job that writes the namespace.
	Job string `json:"job"`
	// Stores are the stores the API reads, in the order it reads them.
	Stores []string `json:"stores"`
	// Version is the published run version readers get ("" when none).
	Version string `json:"version"`
	// PublishedAt is when Version was published or rolled back to (RFC
	// 3339), "" when unknown.
	PublishedAt string `json:"published_at,omitempty"`
	// Rows is the number of records of Version (its committed shards'
	// counts); absent when unknown (no Redis sink, publish: in_place).
	Rows *int64 `json:"rows,omitempty"`
	// Encoding is the record encoding of Version (json or msgpack).
	Encoding string `json:"encoding,omitempty"`
	// Mode is the Redis publish mode (atomic or in_place).
	Mode string `json:"mode,omitempty"`
}

// routeNamespaces serves GET /v1/namespaces/{namespace}.
func (s *Server) routeNamespaces(w http.ResponseWriter, r *http.Request, rest string) {
	if !isGet(r.Method) {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	name, err := url.PathUnescape(rest)
	if err != nil || name == "" || strings.Contains(name, "/") {
		writeError(w, http.StatusNotFound, "no such endpoint (want /v1/namespaces/{namespace})")
		return
	}
	s.nsH(w, r, route{namespace: name})
}

// handleNamespace answers a namespace's metadata (NamespaceInfo): 404 for
// a namespace the server does not serve, 503 when Redis cannot be read.
func (s *Server) handleNamespace(ctx context.Context, w *reqInfo, _ *http.Request, p route) {
	ns, ok := s.ns[p.namespace]
	if !ok {
		writeError(w, http.StatusNotFound, "unknown namespace "+p.namespace+" (served: "+strings.Join(s.names, ", ")+")")
		return
	}
	info := NamespaceInfo{Namespace: ns.name, Job: ns.spec.Name, Stores: []string{}}
	if ns.redis != nil {
		info.Stores = append(info.Stores, "redis")
	}
	if ns.pg != nil {
		info.Stores = append(info.Stores, "postgres")
	}
	if ns.redis != nil {
		if err := ns.redis.describe(ctx, &info); err != nil {
			writeError(w, http.StatusServiceUnavailable, "reading the namespace's metadata from Redis: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, info)
}

// describe fills info from the namespace's Redis bookkeeping: the current
// version, the last publish's meta, and the version's markers' row counts
// (two round trips at most).
func (s *redisStore) describe(ctx context.Context, info *NamespaceInfo) error {
	l, c := s.layout(), s.conn.client
	pipe := c.Pipeline()
	cur := pipe.Get(ctx, l.Current())
	meta := pipe.HGetAll(ctx, l.Meta())
	_, _ = pipe.Exec(ctx) // each command's error is read below
	if err := cur.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	if err := meta.Err(); err != nil {
		return err
	}
	m := meta.Val()
	info.Version, info.Mode = cur.Val(), m["mode"]
	if s.inPlace {
		info.Version, info.Mode = m["version"], string(jobs.RedisPublishInPlace)
	}
	if info.Version == "" {
		return nil
	}
	if m["version"] == info.Version {
		info.PublishedAt, info.Encoding = m["published_at"], m[sinkredis.EncodingField]
	}
	if s.inPlace {
		return nil // in place, the markers are gone once published
	}
	markers, err := c.HGetAll(ctx, l.Shards(info.Version)).Result()
	if err != nil {
		return err
	}
	var rows int64
	counted := false
	for f, raw := range markers {
		var mk sinkredis.Marker
		if f == "format" || f == sinkredis.EncodingField || json.Unmarshal([]byte(raw), &mk) != nil {
			continue
		}
		rows += mk.Rows
		counted = true
	}
	if counted {
		info.Rows = &rows
	}
	if info.Encoding == "" {
		info.Encoding = markers[sinkredis.EncodingField]
	}
	return nil
}
