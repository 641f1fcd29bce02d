package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// config is the defaulted, validated form of jobs.RedisSinkSpec.
type config struct {
	conn      Conn
	addrs     []string
	namespace string
	ttl       time.Duration
	publish   jobs.RedisPublish
	retain    int
	username  string
	password  string
	db        int
	tls       bool
	batch     int
	depth     int
	timeout   time.Duration
	encoding  string // EncodingJSON or EncodingMsgpack
}

// newConfig applies the spec's defaults (jobs owns them: a spec built in
// code gets the same as a loaded one) and validates it. Errors name the
// spec field (sinks.redis.*) and never contain the password.
func newConfig(spec jobs.RedisSinkSpec) (config, error) {
	spec.Normalize(nil)
	conn, err := ParseConn(spec)
	if err != nil {
		return config{}, err
	}
	c := config{
		conn:      conn,
		addrs:     conn.Addrs,
		namespace: spec.Namespace,
		ttl:       spec.TTL.Duration,
		publish:   spec.Publish,
		retain:    spec.Retain,
		username:  conn.Username,
		password:  conn.Password,
		db:        conn.DB,
		tls:       conn.TLS,
		batch:     spec.PipelineBatch,
		depth:     spec.PipelineDepth,
		timeout:   spec.Timeout.Duration,
		encoding:  string(spec.Encoding),
	}
	if err := ValidNamespace(c.namespace); err != nil {
		return c, fmt.Errorf("sinks.redis.namespace: %w", err)
	}
	if !c.publish.Valid() {
		return c, fmt.Errorf("sinks.redis.publish: %q is not atomic or in_place", c.publish)
	}
	if c.ttl < 0 {
		return c, fmt.Errorf("sinks.redis.ttl: %s is negative", c.ttl)
	}
	if c.ttl > 0 && c.ttl < time.Millisecond {
		return c, fmt.Errorf("sinks.redis.ttl: %s is below Redis's 1ms resolution", c.ttl)
	}
	if c.retain < 1 {
		return c, fmt.Errorf("sinks.redis.retain: %d must be at least 1", c.retain)
	}
	if c.batch < 1 || c.batch > 1<<20 {
		return c, fmt.Errorf("sinks.redis.pipeline_batch: %d out of range 1..%d", c.batch, 1<<20)
	}
	if c.depth < 1 || c.depth > 1024 {
		return c, fmt.Errorf("sinks.redis.pipeline_depth: %d out of range 1..1024", c.depth)
	}
	if !spec.Encoding.Valid() {
		return c, fmt.Errorf("sinks.redis.encoding: %q is not json or msgpack", c.encoding)
	}
	if c.timeout < 0 {
		return c, fmt.Errorf("sinks.redis.timeout: %s is negative", c.timeout)
	}
	return c, nil
}

// where names the server(s) in errors and logs, without credentials.
func (c config) where() string { return strings.Join(c.addrs, ",") }

// newClient builds a UniversalClient: a cluster client for several
// addresses, a plain client otherwise. Internal retries are off: the sink
// retries whole pipelines itself with backoff, so that every retry is
// visible and bounded.
func (c config) newClient() goredis.UniversalClient {
	opt := c.conn.Options()
	opt.ClientName = "precog-sink"
	opt.MaxRetries = -1
	opt.DialTimeout = c.timeout
	opt.ReadTimeout = c.timeout
	opt.WriteTimeout = c.timeout
	// Caps, not standing connections: enough for several shard writers of
	// depth pipelines each plus publish and cleanup.
	opt.PoolSize = max(c.depth*8, 10*runtime.GOMAXPROCS(0))
	opt.PipelinePoolSize = max(c.depth*8, 10*runtime.GOMAXPROCS(0))
	return goredis.NewUniversalClient(opt)
}

// redact removes secrets from a message. The password may appear in a URL
// or be echoed by a proxy; it must never reach a log or an error.
func redact(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[REDACTED]")
		}
	}
	return msg
}

// urlPassword extracts the password of a redis:// URL, for redaction only.
func urlPassword(u string) string {
	at := strings.LastIndexByte(u, '@')
	if at < 0 {
		return ""
	}
	head := u[:at]
	if i := strings.Index(head, "://"); i >= 0 {
		head = head[i+3:]
	}
	if i := strings.IndexByte(head, ':'); i >= 0 {
		return head[i+1:]
	}
	return ""
}

// sanitize wraps err with the sink's address and removes the password; a
// connection failure is marked with sinks.ErrUnreachable.
func (c config) sanitize(op string, err error) error {
	if err == nil {
		return nil
	}
	msg := c.conn.Redact(err.Error())
	if isConnErr(err) {
		return &sinkError{msg: fmt.Sprintf("redis %s unreachable: %s: %s", c.where(), op, msg), unreachable: true, cause: causeOf(err)}
	}
	return &sinkError{msg: fmt.Sprintf("redis %s: %s: %s", c.where(), op, msg), cause: causeOf(err)}
}

// causeOf keeps context errors reachable through errors.Is without exposing
// the original error text (which could hold secrets).
func causeOf(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return nil
}

// sinkError is a redacted error; Is reports sinks.ErrUnreachable for
// connection failures and the context error that caused it, if any.
type sinkError struct {
	msg         string
	unreachable bool
	cause       error
}

func (e *sinkError) Error() string { return e.msg }

// Is matches sinks.ErrUnreachable for connection failures.
func (e *sinkError) Is(target error) bool {
	return (e.unreachable && target == sinks.ErrUnreachable) || (e.cause != nil && target == e.cause)
}

// isConnErr reports errors of the network rather than of Redis itself.
func isConnErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &oe), errors.As(err, &ne):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed),
		errors.Is(err, goredis.ErrPoolTimeout):
		return true
	}
	return false
}

// isTransient reports errors worth re-sending a pipeline for: connection
// loss, timeouts, and Redis's own "try later" replies.
func isTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, goredis.ErrClosed) {
		return false
	}
	if isConnErr(err) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "BUSY ", "MOVED", "ASK "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}
